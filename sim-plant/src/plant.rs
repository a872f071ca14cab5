//! The plant: GPUs, racks, CDUs, facility water, heat rejection and the electrical chain, stepped
//! in time. See `plant-model.md` for the equations; this file cites its sections.
//!
//! Stepping order within one step of length `dt`:
//! 1. apply the supervisor's actions (setpoint writes with firmware limits, heartbeats, caps);
//! 2. update fault states and the BMS-timeout fail-safe;
//! 3. GPUs (§2): power with leakage and caps, die temperature by an exact first-order lag towards
//!    `T_in + P·R(ṁ)`, slowdown with hysteresis, shutdown; racks (§3) sum power and heat;
//! 4. CDUs and facility water (§4, §5) in sub-steps of at most [`SUBSTEP_MAX_S`]: local PI loops,
//!    ε-NTU heat exchangers, loop thermal masses stepped exactly, heat rejection and staging;
//! 5. electrical chain (§6) and KPI accumulation;
//! 6. sensors (§9): bias, noise, quantisation, lag and faults → [`Measurements`].

use crate::faults::{FaultKind, ScheduledFault, SensorFailure, SensorPoint};
use crate::gpu::{kernel_exact, kernel_fast, GpuConsts, RackGpus, DEAD};
use crate::hx::{counterflow_conductance, counterflow_ntu, lag};
use crate::immersion::Immersion;
use crate::kpi::{KpiAccumulator, Kpis, StepFlows};
use coolplane_core::fluid::{
    pg25_kg_s_to_lpm, pg25_lpm_to_kg_s, water_kg_s_to_lpm, AIR_CP_J_KG_K, PG25_CP_J_KG_K, PG25_DENSITY_KG_M3,
    WATER_CP_J_KG_K, WATER_DENSITY_KG_M3, WATER_H_FG_J_KG,
};
use coolplane_core::signals::{
    cdu_alarm, Actions, CduMeasurement, FacilityMeasurement, GpuTelemetry, Measurements, MeterMeasurement, Quality,
    RackMeasurement, Reading, RejectionMode,
};
use coolplane_core::site::{Site, SiteError};
use coolplane_core::topology::Topology;
use coolplane_core::weather::WeatherSample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use thiserror::Error;

/// Longest sub-step of the CDU and facility loops, s.
pub const SUBSTEP_MAX_S: f64 = 5.0;
/// After a fault starts or ends, or a standby pump finishes starting, the whole plant runs in
/// sub-steps of at most [`EVENT_SUBSTEP_S`] for this long, s.
pub const EVENT_WINDOW_S: f64 = 600.0;
/// Sub-step of the whole plant (GPUs and loops) inside an event window, s: short against the pump
/// inertia (2 s) and the die time constant, so the GPUs see the flow of the current second.
pub const EVENT_SUBSTEP_S: f64 = 1.0;
/// Minimum on time and minimum off time of the heat-rejection fans, s.
pub const FAN_MIN_ON_OFF_S: f64 = 300.0;
/// A GPU that shut down restarts after this long, s.
pub const GPU_RESTART_S: f64 = 600.0;
/// Supply stability is scored at every step against a reference that follows the CDU supply
/// setpoint at most this fast, K/s (1 K/min): a setpoint change is not a licence to deviate, and a
/// controller that writes often is scored like one that writes rarely.
pub const SUPPLY_REF_RAMP_K_PER_S: f64 = 1.0 / 60.0;
const PUMP_INERTIA_TAU_S: f64 = 2.0;
/// Air density at the air handlers, kg/m³ (≈ 30 °C, sea level).
const AIR_DENSITY_KG_M3: f64 = 1.16;
/// Warm coil: water-side / air-side capacity rate at design.
const WARM_COIL_WATER_TO_AIR: f64 = 1.5;
/// Gravitational acceleration, m/s².
const G_M_S2: f64 = 9.81;
/// Evaporating temperature below the chilled-water supply, K.
const EVAPORATOR_APPROACH_K: f64 = 3.0;
/// Air-side chiller compressors: minimum run and minimum off time, s.
const AHU_CHILLER_MIN_RUN_S: f64 = 600.0;
const AHU_CHILLER_MIN_OFF_S: f64 = 300.0;
/// Trim chiller staging: a stage is added when the running stages are loaded above this fraction
/// of their capacity for [`CHILLER_STAGE_UP_S`], and removed when the load would fit in one stage
/// fewer at [`CHILLER_STAGE_DOWN_FRAC`] for [`CHILLER_STAGE_DOWN_S`] (hysteresis between the two).
const CHILLER_STAGE_UP_FRAC: f64 = 0.95;
const CHILLER_STAGE_UP_S: f64 = 300.0;
const CHILLER_STAGE_DOWN_FRAC: f64 = 0.8;
const CHILLER_STAGE_DOWN_S: f64 = 900.0;
const VALVE_MIN: f64 = 0.05;
const FILM_EXPONENT: f64 = 0.7;
const SECONDS_PER_YEAR: f64 = 365.0 * 86_400.0;
const KELVIN: f64 = 273.15;

/// The plant could not be built.
#[derive(Debug, Error)]
pub enum PlantError {
    /// The site description is invalid.
    #[error(transparent)]
    Site(#[from] SiteError),
    /// The site's design point is physically impossible (e.g. the HX approach cannot be reached).
    #[error("site design point: {0}")]
    Design(String),
}

/// Design constants of the CDUs of one `[[halls]]` entry.
#[derive(Debug, Clone)]
struct CduParams {
    f_design_kg_s: f64,
    f_full_kg_s: f64,
    f_min_kg_s: f64,
    f_max_kg_s: f64,
    m_cold_design_kg_s: f64,
    ua_design: f64,
    r_hot_design: f64,
    r_cold_design: f64,
    c_loop_j_k: f64,
    pump_design_w: f64,
    gpu_ref_flow_kg_s: f64,
    gpus_per_rack: usize,
}

/// Design constants of the heat rejection of one `[[halls]]` entry.
#[derive(Debug, Clone)]
struct RejectionParams {
    design_approach_k: f64,
    c_air_full: f64,
    ua_full: f64,
    fan_full_w: f64,
    fan_min_speed: f64,
    tower: bool,
    cycles: f64,
    adiabatic: Option<(f64, f64)>,
    c_facility_j_k: f64,
    pump_design_w: f64,
    m_facility_design_kg_s: f64,
    hyd: Option<HydParams>,
    crah: Option<CrahParams>,
}

/// Facility pumps on a system curve (see [`coolplane_core::site::Hydraulics`]).
#[derive(Debug, Clone)]
struct HydParams {
    static_m: f64,
    friction_m: f64,
    shutoff_m: f64,
    eta_bep: f64,
    eta_drive: f64,
    /// Largest change of pump flow per second, kg/s².
    ramp_kg_s2: f64,
    /// Water in the supply main, kg.
    main_kg: f64,
}

/// Air handlers (see [`coolplane_core::site::Crah`]).
#[derive(Debug, Clone)]
struct CrahParams {
    supply_air_c: f64,
    room_air_max_c: f64,
    air_dt_k: f64,
    m_air_design_kg_s: f64,
    fan_design_w: f64,
    ua_warm_design: f64,
    chw_c: f64,
    chw_dt_k: f64,
    chiller_cap_w: f64,
    carnot: f64,
    cop_max: f64,
    cond_approach_k: f64,
    fc_approach_k: f64,
    fc_fan_kw_per_kw: f64,
}

#[derive(Debug, Clone, Default)]
struct RackState {
    share: f64,
    pickup_w: f64,
    inlet_c: f64,
    outlet_c: f64,
    flow_kg_s: f64,
    power_w: f64,
    gpu_max_true_c: f32,
    gpu_max_reported_c: f32,
}

#[derive(Debug, Clone, Default)]
struct CduState {
    t_sup: f64,
    t_ret: f64,
    valve: f64,
    valve_i: f64,
    speed: f64,
    flow_kg_s: f64,
    running: u32,
    standby: u32,
    tripped: u32,
    failover_until: Option<f64>,
    sp_supply_remote: f64,
    sp_flow_remote_lpm: f64,
    sp_supply: f64,
    sp_flow_lpm: f64,
    last_heartbeat_s: f64,
    fallback: bool,
    sp_ref: f64,
    fouling_rate_per_s: f64,
    fouling_frac: f64,
    extra_fouling_frac: f64,
    /// HX conductance UA during the last step (flows and fouling), W/K.
    ua_w_k: f64,
    valve_stuck: Option<f64>,
    /// When a write last moved the supply setpoint in force, s.
    sp_moved_s: f64,
    offline: bool,
    q_liq_w: f64,
    q_hx_w: f64,
    pump_w: f64,
    fac_in_c: f64,
    bias: [f64; 4],
    meas_lag: [f64; 4],
    alarms: u16,
}

#[derive(Debug, Clone, Default)]
struct HallState {
    t_sup: f64,
    t_ret: f64,
    flow_kg_s: f64,
    fan: f64,
    fan_i: f64,
    fan_avail: f64,
    fans_on: bool,
    fan_state_s: f64,
    coil_frac: f64,
    adiabatic: bool,
    chiller: bool,
    chiller_stages: u32,
    chiller_stage_s: f64,
    chiller_up_s: f64,
    chiller_down_s: f64,
    clock_s: f64,
    supply_hist: std::collections::VecDeque<(f64, f64)>,
    room_air_c: f64,
    ahu_comp_on: bool,
    ahu_comp_state_s: f64,
    warm_coil_w: f64,
    sat_timer_s: f64,
    relax_timer_s: f64,
    chiller_idle_s: f64,
    sp_remote: f64,
    sp: f64,
    /// Heat-rejection mode as the supervisor last wrote it, and in force (auto during fallback).
    mode_remote: RejectionMode,
    mode: RejectionMode,
    last_heartbeat_s: f64,
    fallback: bool,
    air_heat_w: f64,
    ahu_w: f64,
    pumps_w: f64,
    fans_w: f64,
    chiller_w: f64,
    heat_pump_w: f64,
    reused_w: f64,
    water_l_s: f64,
    bias: f64,
    meas_lag: f64,
}

/// A deliberate error put into the plant's physics or metering, so that tests can show the
/// energy ledger and the IT-meter check fail when a watt is lost or counted twice. Never used
/// outside tests; [`Plant::inject_error`] sets it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InjectedError {
    /// The plant is as built.
    #[default]
    None,
    /// The CDU loops forget the heat of their own pumps.
    DropCduPumpHeat,
    /// The facility water receives the racks' air-side heat twice.
    DoubleAirHeat,
    /// The utility meter's IT path leaves out the first rack.
    MeterDropsRack,
    /// An immersion tank's skid loop receives only 90 % of the heat condensed on its coil (the
    /// pool still gives up all of it).
    DropCondenserHeat,
}

/// Electrical and cooling power of the last step, W (true values, for tests and validation).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PowerBreakdown {
    /// Utility meter.
    pub facility_w: f64,
    /// IT at rack input.
    pub it_w: f64,
    /// CDU pumps.
    pub cdu_pumps_w: f64,
    /// Facility pumps.
    pub facility_pumps_w: f64,
    /// Dry-cooler / tower fans.
    pub rejection_fans_w: f64,
    /// Chillers: the facility water's trim chiller and, where air handlers are modelled, their
    /// air-side chiller (compressor and its free-cooling fans).
    pub chiller_w: f64,
    /// Air-handler fans.
    pub air_handler_fans_w: f64,
    /// Cooling of the electrical rooms (fan coils, their share of the air-side chiller and its
    /// free-cooling fans).
    pub elec_room_cooling_w: f64,
    /// Heat-reuse heat pump.
    pub heat_pump_w: f64,
    /// Transformer + UPS + PDU losses.
    pub electrical_losses_w: f64,
}

impl PowerBreakdown {
    /// All cooling power, W.
    pub fn cooling_w(&self) -> f64 {
        self.cdu_pumps_w
            + self.facility_pumps_w
            + self.rejection_fans_w
            + self.chiller_w
            + self.air_handler_fans_w
            + self.elec_room_cooling_w
    }
}

/// The simulated plant. Construct with [`Plant::new`], drive with [`Plant::step`].
#[derive(Debug, Clone)]
pub struct Plant {
    site: Site,
    topo: Topology,
    t_s: f64,
    rng: ChaCha8Rng,
    cdu_params: Vec<CduParams>,
    rej_params: Vec<RejectionParams>,
    // Per-GPU state (structure of arrays).
    gpu_temp: Vec<f32>,
    gpu_r_cond: Vec<f32>,
    gpu_cap: Vec<f32>,
    gpu_slot: Vec<u32>,
    gpu_flags: Vec<u8>,
    gpu_bias: Vec<f32>,
    slot_util: Vec<f32>,
    eff_util: Vec<f32>,
    gpu_util: Vec<f32>,
    scratch_temp: Vec<f32>,
    scratch_flags: Vec<u8>,
    restarts: Vec<(u32, f64)>,
    newly_dead: Vec<u32>,
    racks: Vec<RackState>,
    cdus: Vec<CduState>,
    halls: Vec<HallState>,
    faults: Vec<ScheduledFault>,
    fault_active: Vec<bool>,
    fault_stuck_value: Vec<f64>,
    heat_wave_k: f64,
    ambient_seen: WeatherSample,
    budget_w: f64,
    load_storm: Option<f32>,
    comms_loss: bool,
    meas: Measurements,
    power: PowerBreakdown,
    scoring: bool,
    kpi: KpiAccumulator,
    last_dt_s: f64,
    /// Two-phase immersion tanks (halls with `[halls.immersion]`), see [`crate::immersion`].
    immersion: Option<Immersion>,
    injected: InjectedError,
    fine_until_s: f64,
    dead_acc: Vec<u32>,
    leakage_scale: f64,
    it_rack_path_w: f64,
    scratch_cdu: Vec<[f64; 2]>,
    scratch_hall: Vec<[f64; 10]>,
}

impl Plant {
    /// Build the plant for a validated site, with all seeded plant effects drawn from `seed`.
    pub fn new(site: &Site, seed: u64) -> Result<Self, PlantError> {
        site.validate()?;
        let topo = Topology::new(site);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut cdu_params = Vec::new();
        let mut rej_params = Vec::new();
        for h in &site.halls {
            let (c, r) = design_params(site, h)?;
            cdu_params.push(c);
            rej_params.push(r);
        }
        let n = topo.gpu_count;
        let cp = &site.cold_plate;
        let mut gpu_r_cond = Vec::with_capacity(n);
        let mut gpu_bias = Vec::with_capacity(n);
        for _ in 0..n {
            let z: f64 = rng.sample(StandardNormal);
            let r = cp.r_cond_k_per_w * (1.0 + cp.r_cond_spread_pct / 100.0 * z.clamp(-4.0, 4.0));
            gpu_r_cond.push(r.max(cp.r_cond_k_per_w * 0.5) as f32);
            let b: f64 = rng.sample(StandardNormal);
            gpu_bias.push((b * site.sensors.gpu_temp_bias_k) as f32);
        }
        let mut racks = vec![RackState::default(); topo.racks.len()];
        for c in &topo.cdus {
            let spec = &topo.hall_spec(site, c.hall).rack;
            let mut w: Vec<f64> = c
                .racks
                .clone()
                .map(|_| 1.0 + spec.flow_imbalance_pct / 100.0 * (rng.random::<f64>() * 2.0 - 1.0))
                .collect();
            let sum: f64 = w.iter().sum();
            for x in &mut w {
                *x /= sum;
            }
            for (r, share) in c.racks.clone().zip(w) {
                racks[r].share = share;
            }
        }
        let mut cdus = Vec::with_capacity(topo.cdus.len());
        for c in &topo.cdus {
            let h = topo.hall_spec(site, c.hall);
            let p = &cdu_params[topo.halls[c.hall].spec];
            let mut bias = [0.0; 4];
            for b in &mut bias {
                *b = rng.sample::<f64, _>(StandardNormal) * site.sensors.temp_bias_k;
            }
            let fouling_mult = 0.5 + rng.random::<f64>();
            let sp_flow = pg25_kg_s_to_lpm(p.f_design_kg_s);
            cdus.push(CduState {
                t_sup: h.cdu.supply_setpoint_c,
                t_ret: h.cdu.supply_setpoint_c,
                valve: 0.5,
                valve_i: 0.5,
                speed: p.f_design_kg_s / p.f_full_kg_s,
                flow_kg_s: p.f_design_kg_s,
                running: h.cdu.duty_pumps,
                standby: h.cdu.standby_pumps,
                tripped: 0,
                failover_until: None,
                sp_supply_remote: h.cdu.supply_setpoint_c,
                sp_flow_remote_lpm: sp_flow,
                sp_supply: h.cdu.supply_setpoint_c,
                sp_flow_lpm: sp_flow,
                last_heartbeat_s: 0.0,
                fallback: false,
                sp_ref: h.cdu.supply_setpoint_c,
                fouling_rate_per_s: h.cdu.fouling_pct_per_year / 100.0 * fouling_mult / SECONDS_PER_YEAR,
                fouling_frac: 0.0,
                extra_fouling_frac: 0.0,
                ua_w_k: 0.0,
                valve_stuck: None,
                sp_moved_s: f64::NEG_INFINITY,
                offline: false,
                q_liq_w: 0.0,
                q_hx_w: 0.0,
                pump_w: 0.0,
                fac_in_c: h.facility.supply_setpoint_c,
                bias,
                meas_lag: [
                    h.cdu.supply_setpoint_c,
                    h.cdu.supply_setpoint_c,
                    0.0,
                    h.facility.supply_setpoint_c,
                ],
                alarms: 0,
            });
        }
        let mut halls = Vec::with_capacity(topo.halls.len());
        for h in &topo.halls {
            let spec = &site.halls[h.spec];
            let sp = spec.facility.supply_setpoint_c;
            halls.push(HallState {
                t_sup: sp,
                t_ret: sp,
                fan: 0.5,
                fan_i: 0.5,
                fan_avail: 1.0,
                fans_on: true,
                fan_state_s: FAN_MIN_ON_OFF_S,
                coil_frac: 1.0,
                // The CDU valves start half open: the facility pumps start at that flow.
                flow_kg_s: 0.5 * rej_params[h.spec].m_facility_design_kg_s,
                chiller_stage_s: f64::INFINITY,
                ahu_comp_state_s: f64::INFINITY,
                room_air_c: spec.air.crah.as_ref().map_or(f64::NAN, |c| c.supply_air_c),
                sp_remote: sp,
                sp,
                bias: rng.sample::<f64, _>(StandardNormal) * site.sensors.temp_bias_k,
                meas_lag: sp,
                ..Default::default()
            });
        }
        let mut gpu_temp = vec![0.0f32; n];
        for (ci, c) in topo.cdus.iter().enumerate() {
            for r in c.racks.clone() {
                for g in topo.racks[r].gpus.clone() {
                    gpu_temp[g] = (cdus[ci].t_sup + 10.0) as f32;
                }
            }
        }
        let budget_w = site.site.power_budget_kw * 1000.0;
        let immersion = Immersion::new(site, &topo, seed);
        let max_rack = topo.racks.iter().map(|r| r.gpus.len()).max().unwrap_or(0);
        let mut plant = Self {
            site: site.clone(),
            cdu_params,
            rej_params,
            gpu_temp,
            gpu_r_cond,
            gpu_cap: vec![site.gpu.tdp_w as f32; n],
            gpu_slot: vec![0; n],
            gpu_flags: vec![0; n],
            gpu_bias,
            slot_util: vec![0.0],
            eff_util: vec![0.0],
            gpu_util: vec![0.0; n],
            scratch_temp: vec![0.0; max_rack],
            scratch_flags: vec![0; max_rack],
            restarts: Vec::new(),
            newly_dead: Vec::new(),
            racks,
            cdus,
            halls,
            faults: Vec::new(),
            fault_active: Vec::new(),
            fault_stuck_value: Vec::new(),
            heat_wave_k: 0.0,
            // No step yet: no weather seen.
            ambient_seen: WeatherSample {
                dry_bulb_c: f64::NAN,
                wet_bulb_c: f64::NAN,
                dew_point_c: f64::NAN,
                rh_pct: f64::NAN,
                pressure_pa: f64::NAN,
            },
            budget_w,
            load_storm: None,
            comms_loss: false,
            meas: Measurements::default(),
            power: PowerBreakdown::default(),
            scoring: false,
            kpi: KpiAccumulator::default(),
            t_s: 0.0,
            last_dt_s: 1.0,
            immersion,
            injected: InjectedError::None,
            fine_until_s: f64::NEG_INFINITY,
            dead_acc: Vec::new(),
            leakage_scale: 1.0,
            it_rack_path_w: 0.0,
            scratch_cdu: Vec::new(),
            scratch_hall: Vec::new(),
            rng,
            topo,
        };
        plant.meas = plant.empty_measurements();
        plant.kpi = KpiAccumulator::new(plant.stored_heat_j());
        Ok(plant)
    }

    /// The site the plant was built from.
    pub fn site(&self) -> &Site {
        &self.site
    }

    /// The expanded topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Plant time, s since the start of the run.
    pub fn time_s(&self) -> f64 {
        self.t_s
    }

    /// Set the plant clock (before the first step), s.
    pub fn set_time_s(&mut self, t_s: f64) {
        self.t_s = t_s;
        for c in &mut self.cdus {
            c.last_heartbeat_s = t_s;
        }
        for h in &mut self.halls {
            h.last_heartbeat_s = t_s;
        }
    }

    /// Put a deliberate error into the physics or the metering (tests of the self-checks only).
    #[doc(hidden)]
    pub fn inject_error(&mut self, e: InjectedError) {
        self.injected = e;
    }

    /// Scale the GPUs' leakage temperature coefficient κ (sensitivity studies; 1 = the site's
    /// value). Non-finite or negative scales are ignored.
    pub fn set_leakage_scale(&mut self, scale: f64) {
        if scale.is_finite() && scale >= 0.0 {
            self.leakage_scale = scale;
        }
    }

    /// Add a fault to the schedule.
    pub fn schedule_fault(&mut self, fault: ScheduledFault) {
        self.faults.push(fault);
        self.fault_active.push(false);
        self.fault_stuck_value.push(f64::NAN);
    }

    /// The last measurements, as the sensors reported them.
    pub fn measurements(&self) -> &Measurements {
        &self.meas
    }

    /// Start (or restart) the scored window: KPI accumulators are reset now.
    pub fn start_scoring(&mut self) {
        self.scoring = true;
        self.kpi = KpiAccumulator::new(self.stored_heat_j());
    }

    /// KPIs over the scored window so far.
    pub fn kpis(&self) -> Kpis {
        self.kpi.report(self.stored_heat_j())
    }

    /// Whether the KPIs are being scored (after [`Plant::start_scoring`]).
    pub fn is_scoring(&self) -> bool {
        self.scoring
    }

    /// Work a preempted job threw away, GPU-s (called by the cluster scheduler: the job restarts
    /// from the beginning, so its work within the scored window so far was done for nothing).
    pub fn record_thrown_away_work(&mut self, gpu_s: f64) {
        if self.scoring && gpu_s.is_finite() && gpu_s > 0.0 {
            self.kpi.work_thrown_away += gpu_s;
        }
    }

    /// Count a failed job (called by the cluster scheduler).
    pub fn record_failed_job(&mut self) {
        if self.scoring {
            self.kpi.failed_jobs += 1;
        }
    }

    // ---- workload interface -------------------------------------------------------------

    /// Number of job slots (slot 0 is "no job").
    pub fn slot_count(&self) -> usize {
        self.slot_util.len()
    }

    /// Make sure `slots` job slots exist (slot 0 is "no job" and always has utilisation 0).
    pub fn ensure_slots(&mut self, slots: usize) {
        if self.slot_util.len() < slots {
            self.slot_util.resize(slots, 0.0);
            self.eff_util.resize(slots, 0.0);
        }
    }

    /// Set the utilisation of job slot `slot` (0–1). Slot 0 stays idle.
    pub fn set_slot_util(&mut self, slot: u32, util: f32) {
        if slot != 0 {
            if let Some(u) = self.slot_util.get_mut(slot as usize) {
                *u = util.clamp(0.0, 1.0);
            }
        }
    }

    /// Put GPU `gpu` under job slot `slot` (0: free).
    pub fn assign_gpu(&mut self, gpu: u32, slot: u32) {
        if let Some(s) = self.gpu_slot.get_mut(gpu as usize) {
            *s = slot;
        }
    }

    /// Job slot of each GPU.
    pub fn gpu_slots(&self) -> &[u32] {
        &self.gpu_slot
    }

    /// Whether GPU `gpu` is shut down.
    pub fn gpu_is_down(&self, gpu: usize) -> bool {
        self.gpu_flags[gpu] & DEAD != 0
    }

    /// GPUs shut down now (each waits for its restart), in no particular order.
    pub fn down_gpus(&self) -> impl Iterator<Item = usize> + '_ {
        self.restarts.iter().map(|&(g, _)| g as usize)
    }

    /// GPUs that shut down during the last step.
    pub fn newly_shut_down(&self) -> &[u32] {
        &self.newly_dead
    }

    // ---- true state (for validation and tests; never handed to a controller) ---------------

    /// True die temperatures, °C.
    pub fn true_gpu_temps_c(&self) -> &[f32] {
        &self.gpu_temp
    }

    /// True CDU supply temperature, °C.
    pub fn true_cdu_supply_c(&self, cdu: usize) -> f64 {
        self.cdus[cdu].t_sup
    }

    /// True CDU return temperature, °C.
    pub fn true_cdu_return_c(&self, cdu: usize) -> f64 {
        self.cdus[cdu].t_ret
    }

    /// True CDU secondary flow, kg/s.
    pub fn true_cdu_flow_kg_s(&self, cdu: usize) -> f64 {
        self.cdus[cdu].flow_kg_s
    }

    /// True heat a CDU took into its loop during the last step (IT liquid heat + pump heat), W.
    pub fn true_cdu_heat_in_w(&self, cdu: usize) -> f64 {
        self.cdus[cdu].q_liq_w + self.cdus[cdu].pump_w
    }

    /// True heat a CDU passed to facility water during the last step, W.
    pub fn true_cdu_hx_w(&self, cdu: usize) -> f64 {
        self.cdus[cdu].q_hx_w
    }

    /// True HX conductance UA of a CDU during the last step, at that step's flows, W/K.
    pub fn true_cdu_ua_w_k(&self, cdu: usize) -> f64 {
        self.cdus[cdu].ua_w_k
    }

    /// True relative UA loss of a CDU's heat exchanger (natural and injected fouling), 0–1.
    pub fn true_cdu_fouling_frac(&self, cdu: usize) -> f64 {
        let c = &self.cdus[cdu];
        1.0 - (1.0 - c.fouling_frac) * (1.0 - c.extra_fouling_frac)
    }

    /// True facility supply temperature of hall `h`, °C.
    pub fn true_facility_supply_c(&self, h: usize) -> f64 {
        self.halls[h].t_sup
    }

    /// True facility water flow through the pumps of hall `h`, kg/s.
    pub fn true_facility_flow_kg_s(&self, h: usize) -> f64 {
        self.halls[h].flow_kg_s
    }

    /// True facility water temperature arriving at CDU `cdu`'s heat exchanger, °C (the hall's
    /// supply temperature one transport delay ago).
    pub fn true_cdu_facility_inlet_c(&self, cdu: usize) -> f64 {
        self.cdus[cdu].fac_in_c
    }

    /// True supply (room) air temperature of hall `h`, °C (NaN where the air handlers are not
    /// modelled).
    pub fn true_room_air_c(&self, h: usize) -> f64 {
        self.halls[h].room_air_c
    }

    /// Stages of the trim chiller of hall `h` running now.
    pub fn chiller_stages(&self, h: usize) -> u32 {
        self.halls[h].chiller_stages
    }

    /// Outdoor conditions the plant ran the last step under: the weather handed to
    /// [`Plant::step`] with the scenario's offsets (heat wave) applied.
    pub fn ambient_seen(&self) -> WeatherSample {
        self.ambient_seen
    }

    /// The supply temperature setpoint CDU `cdu` works to now (the remote one, or its local one
    /// while it has fallen back), °C.
    pub fn cdu_supply_setpoint_in_force_c(&self, cdu: usize) -> f64 {
        self.cdus[cdu].sp_supply
    }

    /// Whether CDU `cdu` answers (not offline, no site-wide loss of communications): writes
    /// reach it.
    pub fn cdu_reachable(&self, cdu: usize) -> bool {
        !(self.cdus[cdu].offline || self.comms_loss)
    }

    /// Whether the facility systems answer (no site-wide loss of communications).
    pub fn facility_reachable(&self) -> bool {
        !self.comms_loss
    }

    /// The facility supply setpoint hall `h` works to now (remote, or local in fallback), °C.
    pub fn facility_setpoint_in_force_c(&self, h: usize) -> f64 {
        self.halls[h].sp
    }

    /// Whether the trim chiller of hall `h` runs.
    pub fn chiller_on(&self, h: usize) -> bool {
        self.halls[h].chiller
    }

    /// Whether the compressor of hall `h`'s air-side chiller (for the air handlers) runs.
    pub fn air_chiller_compressor_on(&self, h: usize) -> bool {
        self.halls[h].ahu_comp_on
    }

    /// Heat-rejection mode in force in hall `h`.
    pub fn rejection_mode(&self, h: usize) -> RejectionMode {
        self.halls[h].mode
    }

    /// Whether the adiabatic pre-cooling of hall `h` runs.
    pub fn adiabatic_on(&self, h: usize) -> bool {
        self.halls[h].adiabatic
    }

    /// Power breakdown of the last step.
    pub fn power(&self) -> PowerBreakdown {
        self.power
    }

    /// True rack power of the last step, W.
    pub fn true_rack_power_w(&self, rack: usize) -> f64 {
        self.racks[rack].power_w
    }

    /// Bytes of per-GPU state and telemetry (the arrays indexed by GPU), per GPU.
    pub fn per_gpu_state_bytes(&self) -> usize {
        use std::mem::size_of;
        // State: temperature, conduction resistance, power limit, job slot, flags, sensor bias.
        let state = 4 * size_of::<f32>() + size_of::<u32>() + size_of::<u8>();
        // Telemetry: temperature, power, utilisation, power limit, clock events.
        let telemetry = 4 * size_of::<f32>() + size_of::<u8>();
        state + telemetry
    }

    /// Thermal energy stored in all liquid loops and immersion pools relative to 0 °C, J.
    pub fn stored_heat_j(&self) -> f64 {
        let (c, h) = self.stored_heat_split_j();
        c + h + self.stored_heat_tanks_j()
    }

    /// Thermal energy stored in the CDU loops and in the facility loops, J (from loop temperatures).
    fn stored_heat_split_j(&self) -> (f64, f64) {
        let c: f64 = self
            .cdus
            .iter()
            .enumerate()
            .map(|(i, c)| self.cdu_params[self.topo.halls[self.topo.cdus[i].hall].spec].c_loop_j_k * c.t_sup)
            .sum();
        let h: f64 = self
            .halls
            .iter()
            .enumerate()
            .map(|(i, h)| self.rej_params[self.topo.halls[i].spec].c_facility_j_k * h.t_sup)
            .sum();
        (c, h)
    }

    /// Thermal energy stored in the immersion tanks' pools (fluid, hardware, shell), J (from pool
    /// temperatures); 0 without tanks.
    fn stored_heat_tanks_j(&self) -> f64 {
        self.immersion.as_ref().map_or(0.0, Immersion::stored_heat_j)
    }

    /// The two-phase immersion tanks, if the site has any (true state, for validation and tests).
    pub fn immersion(&self) -> Option<&Immersion> {
        self.immersion.as_ref()
    }

    /// Mutable access to the tanks (fault studies and tests: e.g. drain fluid).
    pub fn immersion_mut(&mut self) -> Option<&mut Immersion> {
        self.immersion.as_mut()
    }

    // ---- stepping -----------------------------------------------------------------------

    /// Advance the plant by `dt_s` under outdoor conditions `ambient` and the supervisor's `actions`.
    ///
    /// Events are exact in time: a step is split at every fault start or end and at the moment a
    /// standby pump finishes starting, and for [`EVENT_WINDOW_S`] after any such event the whole
    /// plant (GPUs included, so they see the flow of the current second) runs in sub-steps of at
    /// most [`EVENT_SUBSTEP_S`]. Away from events a step is one piece, as fast as before.
    pub fn step(&mut self, dt_s: f64, ambient: &WeatherSample, actions: &Actions) {
        let dt = if dt_s.is_finite() && dt_s > 0.0 { dt_s } else { return };
        let t_end = self.t_s + dt;
        let mut dead = std::mem::take(&mut self.dead_acc);
        dead.clear();
        let mut first = true;
        let mut amb = *ambient;
        while self.t_s < t_end - 1e-9 {
            let t = self.t_s;
            // Faults first: a fault starting now sets the event window and the standby's start.
            self.apply_faults();
            let mut h = t_end - t;
            if self.fine_until_s > t {
                h = h.min(EVENT_SUBSTEP_S);
            }
            if let Some(ev) = self.next_event_after(t) {
                if ev < t + h - 1e-9 {
                    h = ev - t;
                }
            }
            if t_end - (t + h) < 1e-9 {
                h = t_end - t;
            }
            if first {
                self.apply_actions(actions);
                first = false;
            }
            amb = *ambient;
            amb.dry_bulb_c += self.heat_wave_k;
            amb.wet_bulb_c += self.heat_wave_k;
            self.ambient_seen = amb;
            self.update_fail_safes();
            let work = self.step_gpus(h);
            dead.extend_from_slice(&self.newly_dead);
            let flows = self.step_loops(h, &amb);
            self.t_s = if t_end - (t + h) < 1e-9 { t_end } else { t + h };
            self.last_dt_s = h;
            let step = self.electrical(h, flows, work);
            self.advance_supply_reference(h);
            if self.scoring {
                self.kpi.add(&step);
                self.score_supply_deviation();
            }
        }
        std::mem::swap(&mut self.newly_dead, &mut dead);
        self.dead_acc = dead;
        self.last_dt_s = dt;
        self.measure(&amb);
    }

    /// The next fault start or end, or standby-pump start, strictly after `t`.
    fn next_event_after(&self, t: f64) -> Option<f64> {
        let mut next = f64::INFINITY;
        for f in &self.faults {
            for e in [Some(f.start_s), f.end_s].into_iter().flatten() {
                if e > t + 1e-9 && e < next {
                    next = e;
                }
            }
        }
        for c in &self.cdus {
            if let Some(u) = c.failover_until {
                if u > t + 1e-9 && u < next {
                    next = u;
                }
            }
        }
        next.is_finite().then_some(next)
    }

    fn apply_faults(&mut self) {
        let t = self.t_s;
        self.heat_wave_k = 0.0;
        self.budget_w = self.site.site.power_budget_kw * 1000.0;
        self.load_storm = None;
        self.comms_loss = false;
        for c in &mut self.cdus {
            c.valve_stuck = None;
            c.offline = false;
            c.extra_fouling_frac = 0.0;
        }
        for h in &mut self.halls {
            h.fan_avail = 1.0;
        }
        for i in 0..self.faults.len() {
            let f = self.faults[i];
            let active = f.active(t);
            let was = self.fault_active[i];
            self.fault_active[i] = active;
            if active != was {
                self.fine_until_s = self.fine_until_s.max(t + EVENT_WINDOW_S);
            }
            match f.fault {
                FaultKind::PumpTrip { cdu } => {
                    let Some(c) = self.cdus.get_mut(cdu as usize) else {
                        continue;
                    };
                    let spec = &self.topo.hall_spec(&self.site, self.topo.cdus[cdu as usize].hall).cdu;
                    if active && !was {
                        c.running = c.running.saturating_sub(1);
                        c.tripped += 1;
                        if c.standby > 0 {
                            c.standby -= 1;
                            c.failover_until = Some(t + spec.failover_delay_s);
                        }
                    } else if !active && was {
                        // The repaired pump returns to duty if a duty pump is missing, else to standby.
                        c.tripped = c.tripped.saturating_sub(1);
                        if c.running + c.failover_until.map_or(0, |_| 1) < spec.duty_pumps {
                            c.running += 1;
                        } else {
                            c.standby += 1;
                        }
                    }
                }
                _ if !active => {}
                FaultKind::ValveStuck { cdu, position } => {
                    if let Some(c) = self.cdus.get_mut(cdu as usize) {
                        c.valve_stuck = Some(position.clamp(0.0, 1.0));
                    }
                }
                FaultKind::HxFouling { cdu, ua_loss_pct } => {
                    if let Some(c) = self.cdus.get_mut(cdu as usize) {
                        c.extra_fouling_frac = (ua_loss_pct / 100.0).clamp(0.0, 0.95);
                    }
                }
                FaultKind::CduOffline { cdu } => {
                    if let Some(c) = self.cdus.get_mut(cdu as usize) {
                        c.offline = true;
                    }
                }
                FaultKind::FanFailure { hall, fraction } => {
                    if let Some(h) = self.halls.get_mut(hall as usize) {
                        h.fan_avail = (1.0 - fraction).clamp(0.0, 1.0);
                    }
                }
                FaultKind::CommsLoss => self.comms_loss = true,
                FaultKind::Sensor { .. } => {}
                FaultKind::HeatWave { offset_k } => self.heat_wave_k += offset_k,
                FaultKind::BudgetCut { budget_kw } => self.budget_w = budget_kw * 1000.0,
                FaultKind::LoadStorm { util } => self.load_storm = Some(util.clamp(0.0, 1.0) as f32),
            }
        }
        // Standby pumps finish starting.
        let mut started = false;
        for c in &mut self.cdus {
            if let Some(until) = c.failover_until {
                if t >= until - 1e-9 {
                    c.running += 1;
                    c.failover_until = None;
                    started = true;
                }
            }
        }
        if started {
            self.fine_until_s = self.fine_until_s.max(t + EVENT_WINDOW_S);
        }
    }

    fn apply_actions(&mut self, actions: &Actions) {
        let t = self.t_s;
        let scoring = self.scoring;
        for (i, cmd) in actions.cdus.iter().enumerate().take(self.cdus.len()) {
            let c = &mut self.cdus[i];
            if c.offline || self.comms_loss {
                continue;
            }
            let spec = &self.site.halls[self.topo.halls[self.topo.cdus[i].hall].spec].cdu;
            let p = &self.cdu_params[self.topo.halls[self.topo.cdus[i].hall].spec];
            if cmd.heartbeat {
                c.last_heartbeat_s = t;
            }
            if let Some(sp) = cmd.supply_temp_setpoint_c {
                if sp.is_finite() && sp >= spec.supply_setpoint_min_c && sp <= spec.supply_setpoint_max_c {
                    let step = (sp - c.sp_supply).abs();
                    if scoring {
                        self.kpi.setpoint_writes += 1;
                        self.kpi.cdu_write(i);
                        self.kpi.supply_setpoint_travel_k += (sp - c.sp_supply_remote).abs();
                        let minutes = ((t - c.sp_moved_s) / 60.0).max(1.0);
                        self.kpi.supply_setpoint_max_rate_k_per_min =
                            self.kpi.supply_setpoint_max_rate_k_per_min.max(step / minutes);
                    }
                    if step > 0.0 {
                        c.sp_moved_s = t;
                    }
                    c.sp_supply_remote = sp;
                } else if scoring {
                    self.kpi.rejected_writes += 1;
                }
            }
            if let Some(f) = cmd.flow_setpoint_lpm {
                let lo = pg25_kg_s_to_lpm(p.f_min_kg_s);
                let hi = pg25_kg_s_to_lpm(p.f_max_kg_s);
                if f.is_finite() && f >= lo - 1e-9 && f <= hi + 1e-9 {
                    if scoring {
                        self.kpi.setpoint_writes += 1;
                        self.kpi.cdu_write(i);
                        self.kpi.flow_setpoint_travel_lpm += (f - c.sp_flow_remote_lpm).abs();
                    }
                    c.sp_flow_remote_lpm = f;
                } else if scoring {
                    self.kpi.rejected_writes += 1;
                }
            }
        }
        for (i, cmd) in actions.facilities.iter().enumerate().take(self.halls.len()) {
            if self.comms_loss {
                continue;
            }
            let h = &mut self.halls[i];
            let spec = &self.site.halls[self.topo.halls[i].spec].facility;
            let max = coolplane_core::site::water_class_max_c(&spec.water_class).unwrap_or(60.0);
            if cmd.heartbeat {
                h.last_heartbeat_s = t;
            }
            if let Some(sp) = cmd.supply_temp_setpoint_c {
                if sp.is_finite() && sp >= spec.supply_setpoint_min_c && sp <= max {
                    if scoring {
                        self.kpi.setpoint_writes += 1;
                        self.kpi.facility_write(i);
                        self.kpi.facility_setpoint_travel_k += (sp - h.sp_remote).abs();
                    }
                    h.sp_remote = sp;
                } else if scoring {
                    self.kpi.rejected_writes += 1;
                }
            }
            if let Some(mode) = cmd.rejection_mode {
                // Dry and adiabatic mean something only where dry coolers have adiabatic assist:
                // elsewhere the firmware refuses them (as it refuses a setpoint out of range).
                let has_assist = spec.dry_coolers.as_ref().is_some_and(|d| d.adiabatic.is_some());
                if mode == RejectionMode::Auto || has_assist {
                    if scoring {
                        self.kpi.setpoint_writes += 1;
                        self.kpi.facility_write(i);
                    }
                    h.mode_remote = mode;
                } else if scoring {
                    self.kpi.rejected_writes += 1;
                }
            }
        }
        if !self.comms_loss {
            let min = self.site.gpu.min_cap_w as f32;
            let max = self.site.gpu.tdp_w as f32;
            for pl in &actions.power_limits {
                let Some(rack) = self.topo.racks.get(pl.rack as usize) else {
                    continue;
                };
                for (g, &w) in rack.gpus.clone().zip(pl.limits_w.iter()) {
                    // The device clamps to its own limits; NaN is ignored.
                    if w.is_finite() {
                        self.gpu_cap[g] = w.clamp(min, max);
                    }
                }
            }
        }
    }

    fn update_fail_safes(&mut self) {
        let t = self.t_s;
        for (i, c) in self.cdus.iter_mut().enumerate() {
            let spec_idx = self.topo.halls[self.topo.cdus[i].hall].spec;
            let spec = &self.site.halls[spec_idx].cdu;
            let p = &self.cdu_params[spec_idx];
            c.fallback = t - c.last_heartbeat_s > spec.bms_timeout_s;
            let (sp, fl) = if c.fallback {
                (spec.supply_setpoint_c, pg25_kg_s_to_lpm(p.f_design_kg_s))
            } else {
                (c.sp_supply_remote, c.sp_flow_remote_lpm)
            };
            c.sp_supply = sp;
            c.sp_flow_lpm = fl;
        }
        for (i, h) in self.halls.iter_mut().enumerate() {
            let spec = &self.site.halls[self.topo.halls[i].spec].facility;
            h.fallback = t - h.last_heartbeat_s > spec.bms_timeout_s;
            h.sp = if h.fallback {
                spec.supply_setpoint_c
            } else {
                h.sp_remote
            };
            h.mode = if h.fallback { RejectionMode::Auto } else { h.mode_remote };
        }
    }

    /// GPUs and racks. Returns (work done, work demanded, throttled, near) for the step.
    fn step_gpus(&mut self, dt: f64) -> (f64, f64, u64, u64) {
        let g = &self.site.gpu;
        let (idle_w64, dyn_w64) = (g.idle_w, g.tdp_w - g.idle_w);
        let dyn_w = (g.tdp_w - g.idle_w) as f32;
        let alpha = g.perf_alpha as f32;
        let leak60 = g.leakage_at_60c_w();
        let slow = g.slowdown_c as f32;
        let release = (g.slowdown_c - g.slowdown_hysteresis_k) as f32;
        let near = (g.slowdown_c - 5.0) as f32;
        let max_op = g.max_operating_c as f32;
        let shutdown = g.shutdown_c as f32;
        let k = (-dt / g.tau_s).exp() as f32;
        let dt_over_tau = (dt / g.tau_s) as f32;
        let cp = &self.site.cold_plate;
        // Effective utilisation per slot (load storm overrides).
        for (e, &u) in self.eff_util.iter_mut().zip(self.slot_util.iter()) {
            *e = match self.load_storm {
                Some(s) => s,
                None => u,
            };
        }
        self.eff_util[0] = 0.0;
        self.newly_dead.clear();
        // Restart GPUs whose restart time has come.
        let t_end = self.t_s + dt;
        let flags = &mut self.gpu_flags;
        self.restarts.retain(|&(gpu, at)| {
            if t_end >= at {
                flags[gpu as usize] &= !DEAD;
                false
            } else {
                true
            }
        });
        let consts = GpuConsts {
            static_fixed_w: (g.idle_w - leak60) as f32,
            leak60_w: leak60 as f32,
            kappa: (g.leakage_kappa() * self.leakage_scale) as f32,
            dyn_w,
            alpha,
            knee: g.perf_knee.map(|k| k.map(|v| v as f32)),
            slow_c: slow,
            release_c: release,
            near_c: near,
            max_op_c: max_op,
            shutdown_c: shutdown,
            k,
            dt_over_tau,
        };
        // Per-GPU utilisation this step (a gather from the job slots).
        let last = self.eff_util.len() - 1;
        for (u, &s) in self.gpu_util.iter_mut().zip(self.gpu_slot.iter()) {
            *u = self.eff_util[(s as usize).min(last)];
        }
        let telemetry = &mut self.meas.gpus;
        telemetry.util.copy_from_slice(&self.gpu_util);
        let (mut work, mut demand, mut thr_n, mut near_n) = (0.0f64, 0.0f64, 0u64, 0u64);
        let mut max_all = f32::MIN;
        let mut rack_path_w = 0.0f64;
        let mut died = Vec::new();
        for (r, rack) in self.topo.racks.iter().enumerate() {
            let spec_idx = self.topo.halls[rack.hall].spec;
            let p = &self.cdu_params[spec_idx];
            let rs = &self.site.halls[spec_idx].rack;
            let cdu = &self.cdus[rack.cdu];
            let rstate = &mut self.racks[r];
            rstate.flow_kg_s = cdu.flow_kg_s * rstate.share;
            // Manifold pick-up: heat from the room air taken into the supply before the rack inlet,
            // at most the rack's own air-side heat (so it is moved, never created).
            let c_rack = (rstate.flow_kg_s * PG25_CP_J_KG_K).max(1e-3);
            rstate.pickup_w = (rs.manifold_pickup_k * c_rack)
                .min((1.0 - rs.heat_to_liquid) * rstate.power_w)
                .max(0.0);
            rstate.inlet_c = cdu.t_sup + rstate.pickup_w / c_rack;
            let m_g = (rstate.flow_kg_s / p.gpus_per_rack as f64).max(1e-6);
            let r_flow = (cp.r_conv_ref_k_per_w * (p.gpu_ref_flow_kg_s / m_g).powf(cp.conv_exponent)
                + 1.0 / (2.0 * m_g * PG25_CP_J_KG_K)) as f32;
            let range = rack.gpus.clone();
            let n = range.len();
            // Immersion hook: a tank's GPUs boil into its pool (T_sat + boiling curve + package).
            let tank = self
                .immersion
                .as_mut()
                .and_then(|im| im.prepare_rack(rack.cdu, range.clone(), &telemetry.power_w[range.clone()]));
            let (t_in, r_flow, r_cond) = match (tank, &self.immersion) {
                (Some((t, r)), Some(im)) => (t, r, &im.r_eff()[range.clone()]),
                _ => (rstate.inlet_c as f32, r_flow, &self.gpu_r_cond[range.clone()]),
            };
            self.scratch_temp[..n].copy_from_slice(&self.gpu_temp[range.clone()]);
            self.scratch_flags[..n].copy_from_slice(&self.gpu_flags[range.clone()]);
            let mut g = RackGpus {
                t_in,
                r_flow,
                util: &self.gpu_util[range.clone()],
                temp: &mut self.gpu_temp[range.clone()],
                r_cond,
                cap: &self.gpu_cap[range.clone()],
                flags: &mut self.gpu_flags[range.clone()],
                bias: &self.gpu_bias[range.clone()],
                out_temp: &mut telemetry.temp_c[range.clone()],
                out_power: &mut telemetry.power_w[range.clone()],
                out_events: &mut telemetry.clock_events[range.clone()],
            };
            let sums = match kernel_fast(&consts, &mut g) {
                Some(s) => s,
                None => {
                    g.temp.copy_from_slice(&self.scratch_temp[..n]);
                    g.flags.copy_from_slice(&self.scratch_flags[..n]);
                    died.clear();
                    let s = kernel_exact(&consts, &mut g, &mut died);
                    self.newly_dead.extend(died.iter().map(|&i| range.start as u32 + i));
                    s
                }
            };
            // Node overhead (CPUs, memory, NICs, fans) follows the jobs' activity, not the GPU die
            // temperature: a fraction of the GPUs' leakage-free demand (idle + u·dynamic).
            let node_w = rs.node_overhead_frac * (n as f64 * idle_w64 + sums.demand as f64 * dyn_w64)
                + rs.nodes_per_rack as f64 * rs.node_base_w
                + rs.switch_w;
            rstate.power_w = sums.power_w as f64 + node_w;
            // The rack path of the IT-meter check: the GPUs' own power telemetry (0.01 W).
            rack_path_w += sums.telemetry_w as f64 + node_w;
            rstate.gpu_max_true_c = sums.t_max;
            rstate.gpu_max_reported_c = sums.reported_max;
            work += sums.work as f64 * dt;
            demand += sums.demand as f64 * dt;
            thr_n += sums.throttled as u64;
            near_n += sums.near as u64;
            max_all = max_all.max(sums.t_max);
        }
        telemetry.power_limit_w.copy_from_slice(&self.gpu_cap);
        self.it_rack_path_w = rack_path_w;
        for &gpu in &self.newly_dead {
            self.restarts.push((gpu, t_end + GPU_RESTART_S));
        }
        if self.scoring {
            self.kpi.gpu_shutdowns += self.newly_dead.len() as u64;
            self.kpi.gpu_temp_max_c = self.kpi.gpu_temp_max_c.max(max_all as f64);
        }
        (work, demand, thr_n, near_n)
    }

    /// CDUs, facility water and heat rejection in sub-steps. Returns the energy flows of the step.
    fn step_loops(&mut self, dt: f64, amb: &WeatherSample) -> StepFlows {
        let n_sub = (dt / SUBSTEP_MAX_S).ceil().max(1.0) as usize;
        let h = dt / n_sub as f64;
        let mut flows = StepFlows {
            dt_s: dt,
            room_air_c: f64::NAN,
            ..Default::default()
        };
        // Heat each CDU and hall takes this step (constant over the sub-steps).
        for c in &mut self.cdus {
            c.q_liq_w = 0.0;
        }
        for hs in &mut self.halls {
            hs.air_heat_w = 0.0;
        }
        for (r, rack) in self.topo.racks.iter().enumerate() {
            let f_liq = self.site.halls[self.topo.halls[rack.hall].spec].rack.heat_to_liquid;
            let pw = self.racks[r].power_w;
            let pickup = self.racks[r].pickup_w.min((1.0 - f_liq) * pw);
            self.cdus[rack.cdu].q_liq_w += f_liq * pw + pickup;
            self.halls[rack.hall].air_heat_w += (1.0 - f_liq) * pw - pickup;
        }
        // Per-CDU [HX heat, pump heat] and per-hall accumulators, J (reused buffers: no allocation
        // per step once sized).
        let mut cdu_acc = std::mem::take(&mut self.scratch_cdu);
        cdu_acc.clear();
        cdu_acc.resize(self.cdus.len(), [0.0; 2]);
        let mut hall_acc = std::mem::take(&mut self.scratch_hall);
        hall_acc.clear();
        hall_acc.resize(self.halls.len(), [0.0; 10]);
        let (stored_cdu_0, stored_fac_0) = self.stored_heat_split_j();
        let stored_tank_0 = self.stored_heat_tanks_j();
        // Heat into the liquid: cold plates (into CDU loops) and, for immersion tanks, the boards'
        // heat into the pools (the tank's skid loop gets the coil's condensed heat instead).
        let liquid_j: f64 = self.cdus.iter().map(|c| c.q_liq_w).sum::<f64>() * dt;
        let plates_j: f64 = match &self.immersion {
            Some(im) => {
                self.cdus
                    .iter()
                    .enumerate()
                    .filter(|(ci, _)| !im.is_tank(*ci))
                    .map(|(_, c)| c.q_liq_w)
                    .sum::<f64>()
                    * dt
            }
            None => liquid_j,
        };
        if let Some(im) = self.immersion.as_mut() {
            let cdus = &self.cdus;
            im.begin_step(|ci| cdus[ci].q_liq_w);
        }
        let injected = self.injected;
        for _ in 0..n_sub {
            for (hi, hall) in self.topo.halls.iter().enumerate() {
                let spec_idx = hall.spec;
                let spec = &self.site.halls[spec_idx];
                let p = self.cdu_params[spec_idx].clone();
                let rp = &self.rej_params[spec_idx];
                let mut q_to_fac = 0.0;
                // CDU pumps and facility valves first: the valves' demand sets the facility flow.
                let mut fac_demand = 0.0;
                for ci in hall.cdus.clone() {
                    let c = &mut self.cdus[ci];
                    // Pump speed loop (integral action on the flow error) and available pumps.
                    let avail = (c.running.min(spec.cdu.duty_pumps) as f64) / spec.cdu.duty_pumps as f64;
                    let cap = p.f_full_kg_s * avail;
                    let f_sp = pg25_lpm_to_kg_s(c.sp_flow_lpm);
                    let f_now = c.speed * cap;
                    // The loop closes 60 % of the flow error per 5 s sub-step. Over a piece of
                    // length h the error decays by (1 − 0.6·avail)^(h/5), so a step cut into
                    // pieces (a rack agent's command arriving mid-step) converges as one whole
                    // step does; a linear 0.6·h/5 per piece converged faster in short pieces.
                    let per_5s = 0.6 * avail;
                    let gain = if per_5s > 1e-9 {
                        0.6 * (1.0 - (1.0 - per_5s).powf((h / SUBSTEP_MAX_S).min(1.0))) / per_5s
                    } else {
                        0.6 * (h / SUBSTEP_MAX_S).min(1.0)
                    };
                    c.speed = (c.speed + gain * (f_sp - f_now) / p.f_full_kg_s).clamp(spec.cdu.pump_min_speed, 1.0);
                    let f_target = (c.speed * cap).max(p.f_design_kg_s * 1e-3);
                    c.flow_kg_s = lag(c.flow_kg_s, f_target, h, PUMP_INERTIA_TAU_S);
                    let pump_w = p.pump_design_w * (c.flow_kg_s / p.f_design_kg_s).powi(3);
                    // Facility valve PI on supply temperature, with anti-windup by back-calculation.
                    let e = c.t_sup - c.sp_supply;
                    let kp = spec.cdu.valve_kp_per_k;
                    c.valve_i += kp * h / spec.cdu.valve_ti_s * e;
                    let v_unsat = kp * e + c.valve_i;
                    let v = v_unsat.clamp(VALVE_MIN, 1.0);
                    if v != v_unsat {
                        c.valve_i = v - kp * e;
                    }
                    c.valve = c.valve_stuck.unwrap_or(v).max(VALVE_MIN * 0.2);
                    c.pump_w = pump_w;
                    fac_demand += c.valve * p.m_cold_design_kg_s;
                }
                // Facility pumps: the drive follows the valves' demand no faster than its ramp
                // allows; while it lags, every CDU gets the same share of what it asked for.
                let hs = &mut self.halls[hi];
                hs.clock_s += h;
                let m_min = 0.05 * rp.m_facility_design_kg_s;
                let (m_f, flow_share) = match &rp.hyd {
                    Some(hy) => {
                        let d = hy.ramp_kg_s2 * h;
                        let m = fac_demand
                            .max(m_min)
                            .clamp(hs.flow_kg_s - d, hs.flow_kg_s + d)
                            .max(m_min);
                        (m, (m / fac_demand.max(1e-9)).min(1.0))
                    }
                    None => (fac_demand.max(m_min), 1.0),
                };
                // Transport delay: the CDUs see the supply temperature of `main / flow` ago.
                let t_fac = match &rp.hyd {
                    Some(hy) if hy.main_kg > 0.0 => delayed(&hs.supply_hist, hs.clock_s - hy.main_kg / m_f, hs.t_sup),
                    _ => hs.t_sup,
                };
                for ci in hall.cdus.clone() {
                    let c = &mut self.cdus[ci];
                    let pump_w = c.pump_w;
                    // Heat exchanger, ε-NTU with flow-dependent film resistances and fouling.
                    c.fouling_frac = (c.fouling_frac + c.fouling_rate_per_s * h).min(0.9);
                    let ua_frac = (1.0 - c.fouling_frac) * (1.0 - c.extra_fouling_frac);
                    let m_h = c.flow_kg_s;
                    let m_c = c.valve * p.m_cold_design_kg_s * flow_share;
                    let r_h = p.r_hot_design * (p.f_design_kg_s / m_h).powf(FILM_EXPONENT);
                    let r_c = p.r_cold_design * (p.m_cold_design_kg_s / m_c).powf(FILM_EXPONENT);
                    let r_f = (1.0 / ua_frac - 1.0) / p.ua_design;
                    let ua = 1.0 / (r_h + r_c + r_f);
                    c.ua_w_k = ua;
                    let c_h = m_h * PG25_CP_J_KG_K;
                    let a = counterflow_conductance(ua, c_h, m_c * WATER_CP_J_KG_K);
                    // Loop: C·dT/dt = Q_in − a·(T + Q_in/C_h − T_fac), stepped exactly.
                    let pump_heat_w = if injected == InjectedError::DropCduPumpHeat {
                        0.0
                    } else {
                        pump_w
                    };
                    // Immersion hook: a tank's skid takes the heat condensed on its coil.
                    let q_src = match self.immersion.as_mut() {
                        Some(im) => match im.substep(ci, c.t_sup, c.flow_kg_s, h) {
                            Some(q) if injected == InjectedError::DropCondenserHeat => 0.9 * q,
                            Some(q) => q,
                            None => c.q_liq_w,
                        },
                        None => c.q_liq_w,
                    };
                    let q_in = q_src + pump_heat_w;
                    let t_old = c.t_sup;
                    // The HX heat comes from its own inlet temperatures and flows (ε-NTU:
                    // a·(T_return − T_facility)), integrated exactly over the sub-step with the mean
                    // of the lagging loop temperature; it is not "heat in minus storage".
                    let (t_new, e_hx) = if a > 1e-9 {
                        let t_ss = t_fac + q_in * (1.0 - a / c_h) / a;
                        let tau = p.c_loop_j_k / a;
                        let t_mean = t_ss + (t_old - t_ss) * lag_mean_factor(h / tau);
                        (lag(t_old, t_ss, h, tau), a * (t_mean + q_in / c_h - t_fac) * h)
                    } else {
                        (t_old + q_in * h / p.c_loop_j_k, 0.0)
                    };
                    c.t_sup = t_new;
                    c.t_ret = t_new + q_in / c_h;
                    c.fac_in_c = t_fac;
                    cdu_acc[ci][0] += e_hx;
                    cdu_acc[ci][1] += pump_w * h;
                    q_to_fac += e_hx / h;
                }
                // Facility water and heat rejection.
                let hs = &mut self.halls[hi];
                let fw = &spec.facility;
                let c_w = m_f * WATER_CP_J_KG_K;
                let fac_pump_w = match &rp.hyd {
                    // Mean power over the piece: the drive ramps linearly from the last flow
                    // until it reaches this one (Simpson's rule there), then holds; so the energy
                    // does not depend on where a step is cut.
                    Some(hy) => {
                        let m0 = hs.flow_kg_s;
                        let t_ramp = if hy.ramp_kg_s2 > 0.0 {
                            ((m_f - m0).abs() / hy.ramp_kg_s2).min(h)
                        } else {
                            0.0
                        };
                        let pw = |m: f64| facility_pump_w(hy, m, rp.m_facility_design_kg_s);
                        if t_ramp > 0.0 && h > 0.0 {
                            let ramp_j = t_ramp * (pw(m0) + 4.0 * pw(0.5 * (m0 + m_f)) + pw(m_f)) / 6.0;
                            (ramp_j + (h - t_ramp) * pw(m_f)) / h
                        } else {
                            pw(m_f)
                        }
                    }
                    None => rp.pump_design_w * (m_f / rp.m_facility_design_kg_s).powi(3),
                };
                let double_air = if injected == InjectedError::DoubleAirHeat {
                    hs.air_heat_w
                } else {
                    0.0
                };
                // Air side: either modelled air handlers (warm coil on facility water, chilled-water
                // coil on the air-side chiller, room-air limit) or a fan power per kW with all the
                // air-side heat into facility water.
                let (ahu_w, air_into_water_w, air_chiller_w, air_chilled_w, air_residual_w) = match &rp.crah {
                    Some(cr) => {
                        let comp_ok = hs.ahu_comp_on || hs.ahu_comp_state_s >= AHU_CHILLER_MIN_OFF_S;
                        let a = air_handlers(cr, hs.air_heat_w, t_fac, amb.dry_bulb_c, comp_ok);
                        hs.ahu_comp_state_s += h;
                        if a.comp_w > 0.0 && !hs.ahu_comp_on {
                            hs.ahu_comp_on = true;
                            hs.ahu_comp_state_s = 0.0;
                            if self.scoring {
                                self.kpi.chiller_starts += 1;
                            }
                        } else if a.comp_w <= 0.0 && hs.ahu_comp_on && hs.ahu_comp_state_s >= AHU_CHILLER_MIN_RUN_S {
                            hs.ahu_comp_on = false;
                            hs.ahu_comp_state_s = 0.0;
                        }
                        hs.room_air_c = a.room_air_c;
                        hs.warm_coil_w = a.warm_w;
                        // Heat the chilled-water coil gives up, from the chiller's own power:
                        // compressor power × COP + free-cooling fan power / (kW per kW).
                        let chilled = a.comp_w * a.cop
                            + if cr.fc_fan_kw_per_kw > 0.0 {
                                a.fc_w / cr.fc_fan_kw_per_kw
                            } else {
                                a.free_w
                            };
                        (
                            a.fan_w,
                            a.warm_w + double_air,
                            a.comp_w + a.fc_w,
                            chilled,
                            hs.air_heat_w + a.fan_w - a.warm_w - chilled,
                        )
                    }
                    None => {
                        let ahu_w = spec.air.fan_kw_per_kw * hs.air_heat_w;
                        (ahu_w, hs.air_heat_w + double_air + ahu_w, 0.0, 0.0, 0.0)
                    }
                };
                let q_in_f = q_to_fac + air_into_water_w + fac_pump_w;
                // Heat reuse: the heat pump takes what district heating asks for from the return water.
                let (q_reuse, hp_w, hp_cop) = match &fw.heat_reuse {
                    Some(hr) => {
                        let demand = hr.capacity_kw
                            * 1000.0
                            * if amb.dry_bulb_c < hr.heating_limit_c {
                                1.0
                            } else {
                                hr.summer_demand_frac
                            };
                        let q = demand.min(0.8 * q_in_f.max(0.0));
                        let t_src = hs.t_sup + q_in_f / c_w + KELVIN;
                        let t_hot = hr.delivery_c + KELVIN;
                        let cop = (hr.carnot_efficiency * t_hot / (t_hot - t_src).max(1.0)).clamp(1.5, 8.0);
                        (q, q / (cop - 1.0), cop)
                    }
                    None => (0.0, 0.0, 1.0),
                };
                // Primary heat rejection.
                let fan_eff = hs.fan * hs.fan_avail;
                let (t_air, wet) = match (&fw.dry_coolers, rp.tower) {
                    (_, true) => (amb.wet_bulb_c, true),
                    (Some(_), false) => match (hs.adiabatic, rp.adiabatic) {
                        (true, Some((eff, _))) => (amb.dry_bulb_c - eff * (amb.dry_bulb_c - amb.wet_bulb_c), false),
                        _ => (amb.dry_bulb_c, false),
                    },
                    (None, false) => (amb.dry_bulb_c, false),
                };
                let c_air = rp.c_air_full * fan_eff.max(0.02);
                let ua = rp.ua_full * fan_eff.max(0.02).powf(0.8);
                // In winter the fans sit at minimum speed and a bypass valve sends only part of
                // the water through the coils (heat rejected scales with the coil share).
                let a = counterflow_conductance(ua, c_w, c_air) * hs.coil_frac;
                let net_in = q_in_f - q_reuse;
                // Trim chiller: removes what free cooling leaves above the setpoint.
                let t_after_free = hs.t_sup + net_in / c_w - a * (hs.t_sup + net_in / c_w - t_air) / c_w;
                let q_ch_demand = c_w * (t_after_free - hs.sp);
                let q_ch = match (&fw.chiller, hs.chiller) {
                    (Some(ch), true) => q_ch_demand.clamp(
                        0.0,
                        ch.capacity_kw * 1000.0 * f64::from(hs.chiller_stages) / f64::from(ch.stages.max(1)),
                    ),
                    _ => 0.0,
                };
                let (chiller_w, chiller_cop) = match &fw.chiller {
                    Some(ch) if q_ch > 0.0 => {
                        let t_evap = hs.sp - 3.0 + KELVIN;
                        let t_cond = if ch.condenser == "water-cooled" {
                            amb.wet_bulb_c + 8.0
                        } else {
                            amb.dry_bulb_c + 12.0
                        } + KELVIN;
                        let cop = if t_cond > t_evap {
                            (ch.carnot_efficiency * t_evap / (t_cond - t_evap)).min(ch.cop_max)
                        } else {
                            ch.cop_max
                        };
                        (q_ch / cop.max(1.0), cop.max(1.0))
                    }
                    _ => (0.0, 1.0),
                };
                let c_f = rp.c_facility_j_k;
                let t_old = hs.t_sup;
                // Rejected heat from the device's own inlet temperatures and capacity rates
                // (ε-NTU: a·(T_water,in − T_air,in)), integrated exactly over the sub-step.
                let (t_new, e_rej) = if a > 1e-9 {
                    let t_ss = t_air - net_in / c_w + (net_in - q_ch) / a;
                    let tau = c_f / a;
                    let t_mean = t_ss + (t_old - t_ss) * lag_mean_factor(h / tau);
                    (lag(t_old, t_ss, h, tau), a * (t_mean + net_in / c_w - t_air) * h)
                } else {
                    (t_old + (net_in - q_ch) * h / c_f, 0.0)
                };
                hs.t_sup = t_new;
                hs.t_ret = t_new + q_in_f / c_w;
                hs.flow_kg_s = m_f;
                if let Some(hy) = rp.hyd.as_ref().filter(|hy| hy.main_kg > 0.0) {
                    hs.supply_hist.push_back((hs.clock_s, t_new));
                    // Keep what the longest delay (at the lowest flow) can still ask for.
                    let keep_s = hy.main_kg / m_min + 2.0 * SUBSTEP_MAX_S;
                    while hs.supply_hist.len() > 2 && hs.supply_hist[1].0 < hs.clock_s - keep_s {
                        hs.supply_hist.pop_front();
                    }
                }
                // Water: adiabatic pads or tower evaporation and blowdown.
                let water_l_s = if wet {
                    let evap = (e_rej / h).max(0.0) / WATER_H_FG_J_KG;
                    evap * (1.0 + 1.0 / (rp.cycles - 1.0)) / WATER_DENSITY_KG_M3 * 1000.0
                } else if let (true, Some((eff, ratio))) = (hs.adiabatic, rp.adiabatic) {
                    let m_air = c_air / AIR_CP_J_KG_K;
                    let evap =
                        m_air * AIR_CP_J_KG_K * eff * (amb.dry_bulb_c - amb.wet_bulb_c).max(0.0) / WATER_H_FG_J_KG;
                    evap * ratio / WATER_DENSITY_KG_M3 * 1000.0
                } else {
                    0.0
                };
                let fans_w = rp.fan_full_w * fan_eff.powi(3);
                // Local fan loop (PI on facility supply) and staging of adiabatic assist and chiller.
                let e = hs.t_sup - hs.sp;
                let kp = 0.15;
                hs.fan_i += kp * h / 240.0 * e;
                let u = kp * e + hs.fan_i;
                let fan = u.clamp(0.0, 1.0);
                if fan != u {
                    hs.fan_i = fan - kp * e;
                }
                // With the trim chiller running, free cooling is used to the full first.
                // Below minimum fan speed the loop output drives the coil bypass valve instead of
                // stopping the fans (no short-cycling); fans stop only when no heat is to be
                // rejected at all, and start and stop no more often than the minimum on/off time
                // allows (a start is forced early only if the supply is 2 K above setpoint).
                let want_on = hs.chiller || fan > 0.0;
                hs.fan_state_s += h;
                let may = hs.fan_state_s >= FAN_MIN_ON_OFF_S || (want_on && e > 2.0);
                if want_on != hs.fans_on && may {
                    hs.fans_on = want_on;
                    hs.fan_state_s = 0.0;
                    if want_on && self.scoring {
                        self.kpi.rejection_fan_starts += 1;
                    }
                }
                hs.coil_frac = if hs.fans_on && !hs.chiller && fan < rp.fan_min_speed {
                    (fan / rp.fan_min_speed).max(0.0)
                } else if hs.fans_on || hs.chiller {
                    1.0
                } else {
                    0.0
                };
                hs.fan = if hs.chiller {
                    hs.fan_i = 1.0;
                    1.0
                } else if !hs.fans_on {
                    0.0
                } else {
                    fan.max(rp.fan_min_speed)
                };
                let saturated = hs.fan >= 0.99 && e > 0.3;
                hs.sat_timer_s = if saturated { hs.sat_timer_s + h } else { 0.0 };
                // Adiabatic assist is released only when dry air alone could hold the setpoint
                // again: dry-bulb below the setpoint minus the design approach (with 1 K of
                // hysteresis) for 15 minutes, with the fans no longer saturated.
                let dry_would_do = amb.dry_bulb_c < hs.sp - rp.design_approach_k - 1.0;
                hs.relax_timer_s = if dry_would_do && hs.fan < 0.9 {
                    hs.relax_timer_s + h
                } else {
                    0.0
                };
                // Trim chiller: staged on when the heat rejection, adiabatic assist included,
                // has been saturated above its setpoint for 5 minutes; stages added and removed
                // with hysteresis on their load; every stage change waits for the minimum run (or,
                // after a stop, off) time.
                hs.chiller_stage_s += h;
                if hs.sat_timer_s >= 300.0 {
                    if rp.adiabatic.is_some() && !hs.adiabatic && hs.mode == RejectionMode::Auto {
                        hs.adiabatic = true;
                        hs.sat_timer_s = 0.0;
                    } else if let Some(ch) = fw.chiller.as_ref().filter(|_| !hs.chiller) {
                        if hs.chiller_stage_s >= ch.min_off_s {
                            hs.chiller = true;
                            hs.chiller_stages = 1;
                            hs.chiller_stage_s = 0.0;
                            hs.chiller_idle_s = 0.0;
                            if self.scoring {
                                self.kpi.chiller_starts += 1;
                            }
                        }
                    }
                }
                if let Some(ch) = fw.chiller.as_ref().filter(|_| hs.chiller) {
                    let stage_w = ch.capacity_kw * 1000.0 / f64::from(ch.stages.max(1));
                    let on_w = f64::from(hs.chiller_stages) * stage_w;
                    hs.chiller_up_s = if hs.chiller_stages < ch.stages && q_ch_demand >= CHILLER_STAGE_UP_FRAC * on_w {
                        hs.chiller_up_s + h
                    } else {
                        0.0
                    };
                    hs.chiller_down_s =
                        if hs.chiller_stages > 1 && q_ch_demand < CHILLER_STAGE_DOWN_FRAC * (on_w - stage_w) {
                            hs.chiller_down_s + h
                        } else {
                            0.0
                        };
                    hs.chiller_idle_s = if q_ch <= 0.0 { hs.chiller_idle_s + h } else { 0.0 };
                    if hs.chiller_stage_s >= ch.min_run_s {
                        if hs.chiller_up_s >= CHILLER_STAGE_UP_S {
                            hs.chiller_stages += 1;
                            hs.chiller_stage_s = 0.0;
                            hs.chiller_up_s = 0.0;
                            if self.scoring {
                                self.kpi.chiller_starts += 1;
                            }
                        } else if hs.chiller_down_s >= CHILLER_STAGE_DOWN_S {
                            hs.chiller_stages -= 1;
                            hs.chiller_stage_s = 0.0;
                            hs.chiller_down_s = 0.0;
                        } else if hs.chiller_idle_s >= 900.0 {
                            hs.chiller = false;
                            hs.chiller_stages = 0;
                            hs.chiller_stage_s = 0.0;
                        }
                    }
                } else if hs.adiabatic && hs.relax_timer_s >= 900.0 && hs.mode == RejectionMode::Auto {
                    hs.adiabatic = false;
                    hs.relax_timer_s = 0.0;
                }
                // A commanded mode overrides the staging of the assist (never the chiller's).
                match hs.mode {
                    RejectionMode::Auto => {}
                    RejectionMode::Dry => hs.adiabatic = false,
                    RejectionMode::Adiabatic => hs.adiabatic = rp.adiabatic.is_some(),
                }
                let acc = &mut hall_acc[hi];
                // Heat out of the water, each from its own device: the rejection device's ε-NTU
                // heat, the chiller's evaporator (compressor power × COP), the heat pump's
                // evaporator (power × (COP − 1)).
                acc[0] += e_rej + chiller_w * chiller_cop * h + hp_w * (hp_cop - 1.0) * h + air_chilled_w * h;
                acc[1] += q_to_fac * h; // heat from the CDU HXs
                acc[2] += fac_pump_w * h;
                acc[3] += fans_w * h;
                acc[4] += (chiller_w + air_chiller_w) * h;
                acc[5] += ahu_w * h;
                acc[6] += hp_w * h;
                acc[7] += water_l_s * h;
                acc[8] += air_residual_w * h;
                if let Some(cr) = &rp.crah {
                    acc[9] += (hs.room_air_c - cr.room_air_max_c).max(0.0) * h;
                }
                hs.reused_w = q_reuse + hp_w;
                hs.pumps_w = fac_pump_w;
                hs.fans_w = fans_w;
                hs.chiller_w = chiller_w + air_chiller_w;
                hs.heat_pump_w = hp_w;
                hs.ahu_w = ahu_w;
                hs.water_l_s = water_l_s;
            }
        }
        let (stored_cdu_1, stored_fac_1) = self.stored_heat_split_j();
        let stored_tank_1 = self.stored_heat_tanks_j();
        let (mut hx_j, mut pumps_j) = (0.0, 0.0);
        for (ci, c) in self.cdus.iter_mut().enumerate() {
            c.q_hx_w = cdu_acc[ci][0] / dt;
            c.pump_w = cdu_acc[ci][1] / dt;
            hx_j += cdu_acc[ci][0];
            pumps_j += cdu_acc[ci][1];
            flows.cdu_pumps_w += c.pump_w;
        }
        // CDU loops: cold plates (+ tank coils, added below) + pumps − HXs − stored.
        flows.cdu_residual_j = plates_j + pumps_j - hx_j - (stored_cdu_1 - stored_cdu_0);
        let mut hx_into_fac_j = 0.0;
        for (hi, acc) in hall_acc.iter().enumerate() {
            hx_into_fac_j += acc[1];
            flows.heat_out_j += acc[0];
            flows.facility_pumps_w += acc[2] / dt;
            flows.rejection_fans_w += acc[3] / dt;
            flows.chiller_w += acc[4] / dt;
            flows.air_handler_fans_w += acc[5] / dt;
            flows.heat_pump_w += acc[6] / dt;
            flows.water_l_per_s += acc[7] / dt;
            flows.heat_reused_w += self.halls[hi].reused_w;
            flows.air_residual_j += acc[8];
            flows.room_air_over_k_s += acc[9];
            if self.rej_params[self.topo.halls[hi].spec].crah.is_some() {
                flows.room_air_c = if flows.room_air_c.is_nan() {
                    self.halls[hi].room_air_c
                } else {
                    flows.room_air_c.max(self.halls[hi].room_air_c)
                };
            }
        }
        // The facility-loop residual is completed in `electrical` with the IT meter (air-side heat
        // = IT energy − heat into the liquid): here HX heat − out − stored.
        // Halls with modelled air handlers: the racks' air-side heat and the fans' heat go into the
        // room air, and only what the warm coils take enters facility water (the chilled-water
        // coils' heat leaves through the air-side chillers): that part is the room-air residual.
        flows.facility_residual_j =
            hx_into_fac_j - liquid_j - flows.heat_out_j - (stored_fac_1 - stored_fac_0) - flows.air_residual_j;
        if let Some(im) = &self.immersion {
            // Tanks: boards' heat into the pools − condensed − vented − seal losses − stored, each
            // from its own state; the condensed heat enters the skids' loops (CDU residual).
            let t = im.step_totals();
            flows.cdu_residual_j += t.condensed_j;
            flows.tank_residual_j =
                t.heat_in_j - t.condensed_j - t.vented_heat_j - t.leak_heat_j - (stored_tank_1 - stored_tank_0);
            flows.heat_out_j += t.vented_heat_j + t.leak_heat_j;
            flows.fluid_lost_kg = t.fluid_lost_kg;
            flows.fluid_vented_kg = t.fluid_vented_kg;
            flows.tank_max_gauge_kpa = t.max_gauge_kpa;
        }
        flows.heat_in_j = pumps_j;
        self.scratch_cdu = cdu_acc;
        self.scratch_hall = hall_acc;
        flows
    }

    fn electrical(&mut self, dt: f64, mut f: StepFlows, work: (f64, f64, u64, u64)) -> StepFlows {
        let e = &self.site.electrical;
        let skip = usize::from(self.injected == InjectedError::MeterDropsRack);
        let it_w: f64 = self.racks.iter().skip(skip).map(|r| r.power_w).sum();
        let pdu_in = it_w / e.pdu_efficiency;
        let ups_eff = interp(&e.ups_efficiency_curve, pdu_in / (e.ups_rating_kw * 1000.0));
        let ups_in = pdu_in / ups_eff;
        let cooling = f.cdu_pumps_w + f.facility_pumps_w + f.rejection_fans_w + f.chiller_w + f.air_handler_fans_w;
        let misc = self.site.site.misc_load_kw * 1000.0;
        let rating = e.transformer_rating_kva * 1000.0;
        let xfmr = |out: f64| {
            let x = out / rating;
            rating * (e.transformer_no_load_loss_pct + e.transformer_load_loss_pct * x * x) / 100.0
        };
        let out0 = ups_in + cooling + f.heat_pump_w + misc;
        // Electrical rooms: the indoor losses are removed by fan coils on the air-side chilled
        // water. Their cooling power is itself fed through the transformer: one fixed-point pass
        // (the second-order change of the transformer loss is < 1e-6 of the room heat).
        let crah = self.rej_params[self.topo.halls[0].spec].crah.as_ref();
        let room = match (&e.room_cooling, crah) {
            (Some(rc), Some(cr)) => {
                let q = |xfmr_loss: f64| {
                    f64::from(u8::from(rc.ups_indoors)) * (ups_in - pdu_in)
                        + f64::from(u8::from(rc.transformer_indoors)) * xfmr_loss
                };
                let t_db = self.ambient_seen.dry_bulb_c;
                let r0 = electrical_room_cooling(cr, q(xfmr(out0)), t_db, rc.fan_kw_per_kw);
                electrical_room_cooling(cr, q(xfmr(out0 + r0.total_w())), t_db, rc.fan_kw_per_kw)
            }
            _ => RoomCooling::default(),
        };
        let out = out0 + room.total_w();
        let xfmr_loss = xfmr(out);
        let facility = out + xfmr_loss;
        f.elec_room_cooling_w = room.total_w();
        f.dt_s = dt;
        f.it_w = it_w;
        f.it_rack_path_w = self.it_rack_path_w;
        // Ledger: everything a rack draws ends as heat in the loops (cold plates or room air picked
        // up by the air handlers), as does the power of pumps and air-handler fans. The facility
        // loop receives IT heat − cold-plate heat through the air handlers.
        let cdu_pumps_j = f.heat_in_j;
        let fac_extra_j = (f.facility_pumps_w + f.air_handler_fans_w) * dt;
        f.heat_in_j = it_w * dt + cdu_pumps_j + fac_extra_j;
        f.facility_residual_j += it_w * dt + fac_extra_j;
        f.facility_w = facility;
        f.electrical_losses_w = (ups_in - it_w) + xfmr_loss;
        f.misc_w = misc;
        f.budget_w = self.budget_w;
        f.work_done_gpu_s = work.0;
        f.work_demanded_gpu_s = work.1;
        f.throttled_gpus = work.2;
        f.near_throttle_gpus = work.3;
        self.power = PowerBreakdown {
            facility_w: facility,
            it_w,
            cdu_pumps_w: f.cdu_pumps_w,
            facility_pumps_w: f.facility_pumps_w,
            rejection_fans_w: f.rejection_fans_w,
            chiller_w: f.chiller_w,
            air_handler_fans_w: f.air_handler_fans_w,
            elec_room_cooling_w: f.elec_room_cooling_w,
            heat_pump_w: f.heat_pump_w,
            electrical_losses_w: f.electrical_losses_w,
        };
        f
    }

    /// Move each CDU's reference supply temperature towards its setpoint at the reference ramp rate.
    fn advance_supply_reference(&mut self, h: f64) {
        let r = SUPPLY_REF_RAMP_K_PER_S * h;
        for c in &mut self.cdus {
            c.sp_ref += (c.sp_supply - c.sp_ref).clamp(-r, r);
        }
    }

    fn score_supply_deviation(&mut self) {
        for c in &self.cdus {
            self.kpi.supply_temp_max_dev_k = self.kpi.supply_temp_max_dev_k.max((c.t_sup - c.sp_ref).abs());
        }
    }

    /// The image before the first step: what the sensors and devices would report of the initial
    /// state (loop temperatures, flows and the setpoints in force, time-stamped now); figures the
    /// plant has not computed yet (heat, power, rack temperatures, the meter) are `Bad`. A default
    /// `Reading` is a good 0, which a controller would take for a 0 °C setpoint in force.
    fn empty_measurements(&self) -> Measurements {
        let n = self.topo.gpu_count;
        let t = self.t_s;
        let not_yet = Reading {
            value: 0.0,
            t_s: t,
            quality: Quality::Bad,
        };
        let cdus = self
            .cdus
            .iter()
            .map(|c| CduMeasurement {
                supply_temp_c: Reading::good(q10(c.t_sup), t),
                return_temp_c: Reading::good(q10(c.t_ret), t),
                flow_lpm: Reading::good(q10(pg25_kg_s_to_lpm(c.flow_kg_s)), t),
                facility_in_temp_c: Reading::good(q10(c.fac_in_c), t),
                heat_kw: not_yet,
                pump_speed_pct: Reading::good(q10(c.speed * 100.0), t),
                valve_pct: Reading::good(q10(c.valve * 100.0), t),
                pump_power_kw: not_yet,
                supply_setpoint_c: Reading::good(q10(c.sp_supply), t),
                flow_setpoint_lpm: Reading::good(q10(c.sp_flow_lpm), t),
                ..CduMeasurement::default()
            })
            .collect();
        let facilities = self
            .halls
            .iter()
            .map(|h| FacilityMeasurement {
                supply_temp_c: Reading::good(q10(h.t_sup), t),
                return_temp_c: Reading::good(q10(h.t_ret), t),
                flow_lpm: Reading::good(round_tenth(water_kg_s_to_lpm(h.flow_kg_s)), t),
                supply_setpoint_c: Reading::good(q10(h.sp), t),
                fan_speed_pct: not_yet,
                fan_power_kw: not_yet,
                pump_power_kw: not_yet,
                chiller_power_kw: not_yet,
                heat_pump_power_kw: not_yet,
                outdoor_dry_bulb_c: not_yet,
                outdoor_wet_bulb_c: not_yet,
                ..FacilityMeasurement::default()
            })
            .collect();
        let racks = self
            .topo
            .racks
            .iter()
            .map(|r| {
                let hottest = self.gpu_temp[r.gpus.clone()]
                    .iter()
                    .fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)));
                RackMeasurement {
                    it_power_kw: not_yet,
                    inlet_temp_c: not_yet,
                    outlet_temp_c: not_yet,
                    gpu_temp_max_c: if hottest.is_finite() {
                        Reading::good(q10(hottest), t)
                    } else {
                        not_yet
                    },
                }
            })
            .collect();
        let meter = MeterMeasurement {
            facility_power_kw: not_yet,
            it_power_kw: not_yet,
            power_budget_kw: Reading::good(self.budget_w / 1000.0, t),
        };
        Measurements {
            t_s: t,
            cdus,
            facilities,
            racks,
            gpus: GpuTelemetry {
                t_s: self.t_s,
                temp_c: self.gpu_temp.clone(),
                power_w: vec![0.0; n],
                util: vec![0.0; n],
                power_limit_w: self.gpu_cap.clone(),
                clock_events: vec![0; n],
            },
            meter,
        }
    }

    fn noise(&mut self, sigma: f64) -> f64 {
        if sigma > 0.0 {
            self.rng.sample::<f64, _>(StandardNormal) * sigma
        } else {
            0.0
        }
    }

    fn measure(&mut self, amb: &WeatherSample) {
        // A sensor that drops out keeps reporting the last value it delivered before the fault.
        for i in 0..self.faults.len() {
            if let FaultKind::Sensor {
                point,
                failure: SensorFailure::Dropout,
            } = self.faults[i].fault
            {
                if self.fault_active[i] && self.fault_stuck_value[i].is_nan() {
                    self.fault_stuck_value[i] = self.reading_of(point);
                }
            }
        }
        let t = self.t_s;
        let s = self.site.sensors.clone();
        self.meas.t_s = t;
        self.meas.gpus.t_s = t;
        // CDUs: biased, noisy, lagged (sensor time constant = delay), quantised to 0.1 (int16 ×10).
        for i in 0..self.cdus.len() {
            let spec_idx = self.topo.halls[self.topo.cdus[i].hall].spec;
            let duty = self.site.halls[spec_idx].cdu.duty_pumps;
            let c = self.cdus[i].clone();
            let truth = [c.t_sup, c.t_ret, pg25_kg_s_to_lpm(c.flow_kg_s), c.fac_in_c];
            let (bias, sp_s, sp_f, fallback, valve, speed, pump_w, offline) = (
                c.bias,
                c.sp_supply,
                c.sp_flow_lpm,
                c.fallback,
                c.valve,
                c.speed,
                c.pump_w,
                c.offline || self.comms_loss,
            );
            let mut v = [0.0; 4];
            for k in 0..4 {
                let noisy = if k == 2 {
                    truth[k] * (1.0 + self.noise(s.flow_noise_pct / 100.0))
                } else {
                    truth[k] + bias[k] + self.noise(s.temp_noise_k)
                };
                // Temperature sensors respond with a first-order lag (time constant = delay_s).
                let lagged = if k == 2 {
                    noisy
                } else {
                    lag(c.meas_lag[k], noisy, self.last_dt_s, s.delay_s)
                };
                self.cdus[i].meas_lag[k] = lagged;
                v[k] = q10(lagged);
            }
            let heat_kw = pg25_lpm_to_kg_s(v[2]) * PG25_CP_J_KG_K * (v[1] - v[0]) / 1000.0;
            let mut alarms = 0u16;
            if truth[2] < 0.5 * sp_f.max(1.0) && pg25_lpm_to_kg_s(sp_f) > 0.0 {
                alarms |= cdu_alarm::LOW_FLOW;
            }
            if c.t_sup > sp_s + 2.0 {
                alarms |= cdu_alarm::HIGH_SUPPLY_TEMP;
            }
            if c.tripped > 0 || c.failover_until.is_some() || c.running < duty {
                alarms |= cdu_alarm::PUMP_FAULT;
            }
            if fallback {
                alarms |= cdu_alarm::BMS_TIMEOUT;
            }
            if valve >= 0.999 && c.t_sup > sp_s + 0.5 {
                alarms |= cdu_alarm::VALVE_SATURATED;
            }
            self.cdus[i].alarms = alarms;
            let m = &mut self.meas.cdus[i];
            if offline {
                for r in [
                    &mut m.supply_temp_c,
                    &mut m.return_temp_c,
                    &mut m.flow_lpm,
                    &mut m.facility_in_temp_c,
                    &mut m.heat_kw,
                    &mut m.pump_speed_pct,
                    &mut m.valve_pct,
                    &mut m.pump_power_kw,
                    &mut m.supply_setpoint_c,
                    &mut m.flow_setpoint_lpm,
                ] {
                    r.quality = Quality::Bad;
                }
                if let Some(tk) = &mut m.tank {
                    for r in [&mut tk.pressure_gauge_kpa, &mut tk.pool_temp_c, &mut tk.fluid_level_pct] {
                        r.quality = Quality::Bad;
                    }
                }
                continue;
            }
            m.supply_temp_c = Reading::good(v[0], t);
            m.return_temp_c = Reading::good(v[1], t);
            m.flow_lpm = Reading::good(v[2], t);
            m.facility_in_temp_c = Reading::good(v[3], t);
            m.heat_kw = Reading::good(q10(heat_kw), t);
            m.pump_speed_pct = Reading::good(q10(speed * 100.0), t);
            m.valve_pct = Reading::good(q10(valve * 100.0), t);
            m.pump_power_kw = Reading::good(q10(pump_w / 1000.0), t);
            m.supply_setpoint_c = Reading::good(q10(sp_s), t);
            m.flow_setpoint_lpm = Reading::good(q10(sp_f), t);
            m.alarms = alarms;
            m.local_fallback = fallback;
            if let Some(im) = &self.immersion {
                let nk: f64 = self.rng.sample(StandardNormal);
                let nt: f64 = self.rng.sample(StandardNormal);
                self.meas.cdus[i].tank = im.measurement(i, t, 0.1 * nk, s.temp_noise_k * nt);
            }
        }
        for i in 0..self.halls.len() {
            let spec = &self.site.halls[self.topo.halls[i].spec].facility;
            let has_chiller = spec.chiller.is_some();
            let n1 = self.noise(s.temp_noise_k);
            let n2 = self.noise(s.temp_noise_k);
            let h = &mut self.halls[i];
            h.meas_lag = lag(h.meas_lag, h.t_sup + h.bias + n1, self.last_dt_s, s.delay_s);
            let m = &mut self.meas.facilities[i];
            if self.comms_loss {
                m.supply_temp_c.quality = Quality::Bad;
                continue;
            }
            m.supply_temp_c = Reading::good(q10(h.meas_lag), t);
            m.return_temp_c = Reading::good(q10(h.t_ret + n2), t);
            m.flow_lpm = Reading::good(round_tenth(water_kg_s_to_lpm(h.flow_kg_s)), t);
            m.supply_setpoint_c = Reading::good(q10(h.sp), t);
            m.fan_speed_pct = Reading::good(q10(h.fan * 100.0), t);
            m.adiabatic_on = h.adiabatic;
            m.rejection_mode = Some(h.mode);
            m.chiller_on = h.chiller && has_chiller;
            m.fan_power_kw = Reading::good(q10(h.fans_w / 1000.0), t);
            m.pump_power_kw = Reading::good(q10(h.pumps_w / 1000.0), t);
            m.chiller_power_kw = Reading::good(q10(h.chiller_w / 1000.0), t);
            m.heat_pump_power_kw = Reading::good(q10(h.heat_pump_w / 1000.0), t);
            m.outdoor_dry_bulb_c = Reading::good(q10(amb.dry_bulb_c), t);
            m.outdoor_wet_bulb_c = Reading::good(q10(amb.wet_bulb_c), t);
            m.local_fallback = h.fallback;
        }
        let pn = s.power_noise_pct / 100.0;
        for r in 0..self.racks.len() {
            let n = self.noise(pn);
            let nt = self.noise(s.temp_noise_k);
            let rs = &self.racks[r];
            let m = &mut self.meas.racks[r];
            m.it_power_kw = Reading::good(q10(rs.power_w / 1000.0 * (1.0 + n)), t);
            m.inlet_temp_c = Reading::good(q10(rs.inlet_c + nt), t);
            m.outlet_temp_c = Reading::good(q10(rs.outlet_c), t);
            m.gpu_temp_max_c = Reading::good(rs.gpu_max_reported_c as f64, t);
        }
        // Rack outlet temperatures from the liquid heat of the last step.
        for (r, rack) in self.topo.racks.iter().enumerate() {
            let f_liq = self.site.halls[self.topo.halls[rack.hall].spec].rack.heat_to_liquid;
            let rs = &mut self.racks[r];
            rs.outlet_c = rs.inlet_c + f_liq * rs.power_w / (rs.flow_kg_s.max(1e-6) * PG25_CP_J_KG_K);
            self.meas.racks[r].outlet_temp_c = Reading::good(q10(rs.outlet_c), t);
        }
        let pn1 = self.noise(pn);
        let pn2 = self.noise(pn);
        // Meters report 0.1 kW resolution as 32-bit values (no int16 range).
        self.meas.meter.facility_power_kw = Reading::good(round_tenth(self.power.facility_w / 1000.0 * (1.0 + pn1)), t);
        self.meas.meter.it_power_kw = Reading::good(round_tenth(self.power.it_w / 1000.0 * (1.0 + pn2)), t);
        self.meas.meter.power_budget_kw = Reading::good(self.budget_w / 1000.0, t);
        self.apply_sensor_faults();
    }

    fn reading_of(&self, point: SensorPoint) -> f64 {
        let m = &self.meas;
        match point {
            SensorPoint::CduSupplyTemp(c) => m.cdus.get(c as usize).map_or(f64::NAN, |x| x.supply_temp_c.value),
            SensorPoint::CduReturnTemp(c) => m.cdus.get(c as usize).map_or(f64::NAN, |x| x.return_temp_c.value),
            SensorPoint::CduFlow(c) => m.cdus.get(c as usize).map_or(f64::NAN, |x| x.flow_lpm.value),
            SensorPoint::FacilitySupplyTemp(h) => {
                m.facilities.get(h as usize).map_or(f64::NAN, |x| x.supply_temp_c.value)
            }
            SensorPoint::GpuTemp(g) => m.gpus.temp_c.get(g as usize).map_or(f64::NAN, |x| *x as f64),
            SensorPoint::TankPressure(c) => m
                .cdus
                .get(c as usize)
                .and_then(|x| x.tank)
                .map_or(f64::NAN, |t| t.pressure_gauge_kpa.value),
        }
    }

    fn apply_sensor_faults(&mut self) {
        let t = self.t_s;
        for i in 0..self.faults.len() {
            let f = self.faults[i];
            let FaultKind::Sensor { point, failure } = f.fault else {
                continue;
            };
            if !self.fault_active[i] {
                self.fault_stuck_value[i] = f64::NAN;
                continue;
            }
            // The CDU's firmware sees a sensor that reports nothing or its sentinel.
            if let (
                SensorPoint::CduSupplyTemp(c) | SensorPoint::CduReturnTemp(c) | SensorPoint::CduFlow(c),
                SensorFailure::Dropout | SensorFailure::Sentinel,
            ) = (point, failure)
            {
                if let Some(m) = self.meas.cdus.get_mut(c as usize) {
                    m.alarms |= cdu_alarm::SENSOR_FAULT;
                }
                if let Some(cs) = self.cdus.get_mut(c as usize) {
                    cs.alarms |= cdu_alarm::SENSOR_FAULT;
                }
            }
            let reading: &mut Reading = match point {
                SensorPoint::CduSupplyTemp(c) => match self.meas.cdus.get_mut(c as usize) {
                    Some(m) => &mut m.supply_temp_c,
                    None => continue,
                },
                SensorPoint::CduReturnTemp(c) => match self.meas.cdus.get_mut(c as usize) {
                    Some(m) => &mut m.return_temp_c,
                    None => continue,
                },
                SensorPoint::CduFlow(c) => match self.meas.cdus.get_mut(c as usize) {
                    Some(m) => &mut m.flow_lpm,
                    None => continue,
                },
                SensorPoint::FacilitySupplyTemp(h) => match self.meas.facilities.get_mut(h as usize) {
                    Some(m) => &mut m.supply_temp_c,
                    None => continue,
                },
                SensorPoint::TankPressure(c) => {
                    match self.meas.cdus.get_mut(c as usize).and_then(|m| m.tank.as_mut()) {
                        Some(t) => &mut t.pressure_gauge_kpa,
                        None => continue,
                    }
                }
                SensorPoint::GpuTemp(g) => {
                    let Some(v) = self.meas.gpus.temp_c.get_mut(g as usize) else {
                        continue;
                    };
                    match failure {
                        SensorFailure::Stuck => {
                            if self.fault_stuck_value[i].is_nan() {
                                self.fault_stuck_value[i] = *v as f64;
                            }
                            *v = self.fault_stuck_value[i] as f32;
                        }
                        SensorFailure::Drift { rate_per_h } => *v += (rate_per_h * (t - f.start_s) / 3600.0) as f32,
                        SensorFailure::Dropout | SensorFailure::Sentinel => *v = f32::NAN,
                    }
                    continue;
                }
            };
            match failure {
                SensorFailure::Stuck => {
                    if self.fault_stuck_value[i].is_nan() {
                        self.fault_stuck_value[i] = reading.value;
                    }
                    reading.value = self.fault_stuck_value[i];
                }
                SensorFailure::Drift { rate_per_h } => {
                    reading.value = q10(reading.value + rate_per_h * (t - f.start_s) / 3600.0)
                }
                SensorFailure::Dropout => {
                    // Nothing new arrives: the last value from before the fault, with its old time.
                    if self.fault_stuck_value[i].is_nan() {
                        self.fault_stuck_value[i] = reading.value;
                    }
                    reading.value = self.fault_stuck_value[i];
                    reading.quality = Quality::Bad;
                    reading.t_s = f.start_s;
                }
                SensorFailure::Sentinel => {
                    reading.value = f64::NAN;
                    reading.quality = Quality::Uncertain;
                }
            }
        }
    }
}

/// Mean of an exact first-order lag over a step relative to its start offset: the lag moves as
/// `x_ss + (x0 − x_ss)·e^(−t/τ)`, whose mean over `[0, h]` is `x_ss + (x0 − x_ss)·(1 − e^(−r))/r`
/// with `r = h/τ`.
pub(crate) fn lag_mean_factor(r: f64) -> f64 {
    if r < 1e-9 {
        1.0 - 0.5 * r
    } else {
        -(-r).exp_m1() / r
    }
}

/// Round to 0.1 without a register range (32-bit meters).
fn round_tenth(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Quantise to 0.1 as an int16 ×10 register would.
fn q10(x: f64) -> f64 {
    if x.is_finite() {
        (x * 10.0).round().clamp(-32768.0, 32767.0) / 10.0
    } else {
        x
    }
}

fn interp(curve: &[[f64; 2]], x: f64) -> f64 {
    match curve {
        [] => 1.0,
        [only] => only[1],
        _ => {
            if x <= curve[0][0] {
                return curve[0][1];
            }
            for w in curve.windows(2) {
                let ([x0, y0], [x1, y1]) = (w[0], w[1]);
                if x <= x1 {
                    return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
                }
            }
            curve[curve.len() - 1][1]
        }
    }
}

/// Electrical power of the facility pumps at mass flow `m`, W: the operating point is where the
/// pump curve at speed s, `H = H₀·s² − (H₀ − H_d)·(Q/Q_d)²`, meets the system curve
/// `H = H_static + H_friction·(Q/Q_d)²`; the hydraulic efficiency follows a parabola through the
/// best-efficiency point, `η = η_BEP·(1 − (1 − Q/(s·Q_d))²)` (affinity laws move the BEP with speed).
fn facility_pump_w(hy: &HydParams, m: f64, m_design: f64) -> f64 {
    let x = m / m_design;
    let head = hy.static_m + hy.friction_m * x * x;
    let h_d = hy.static_m + hy.friction_m;
    let s = ((head + (hy.shutoff_m - h_d) * x * x) / hy.shutoff_m).sqrt().max(1e-6);
    let q_rel = x / s;
    let eta = (hy.eta_bep * (1.0 - (1.0 - q_rel).powi(2))).max(0.1 * hy.eta_bep);
    let q_m3_s = m / WATER_DENSITY_KG_M3;
    WATER_DENSITY_KG_M3 * G_M_S2 * q_m3_s * head / (eta * hy.eta_drive)
}

/// Temperature of the supply main at `t` from its history (linear between samples; the current
/// value `now` at `clock`); older than the history: its oldest sample.
fn delayed(hist: &std::collections::VecDeque<(f64, f64)>, t: f64, now: f64) -> f64 {
    let i = hist.partition_point(|&(ts, _)| ts <= t);
    match (i.checked_sub(1).and_then(|j| hist.get(j)), hist.get(i)) {
        (Some(&(t0, v0)), Some(&(t1, v1))) if t1 > t0 => v0 + (v1 - v0) * (t - t0) / (t1 - t0),
        (Some(&(_, v0)), Some(_)) => v0,
        (Some(_), None) => now,
        (None, Some(&(_, v1))) => v1,
        (None, None) => now,
    }
}

/// One sub-step of a hall's air handlers.
#[derive(Debug, Clone, Copy)]
struct AirStep {
    fan_w: f64,
    warm_w: f64,
    comp_w: f64,
    cop: f64,
    fc_w: f64,
    free_w: f64,
    room_air_c: f64,
}

/// Air handlers of a hall (quasi-steady: the room air has little heat capacity against a sub-step).
///
/// Airflow follows the racks' air-side heat at the servers' ΔT; fan power is `V·Δp/η` with the
/// pressure ∝ V² (affinity). Return air enters a warm coil on facility water (counterflow ε-NTU,
/// air-side UA ∝ airflow^0.8), then a chilled-water coil that brings it to the supply setpoint.
/// The chilled water comes from an air-cooled chiller with integrated free cooling (fraction from
/// the dry-bulb between chilled-water supply and return, less an approach); the compressor's COP
/// is a fraction of Carnot between the evaporating and condensing temperatures. When the
/// chilled-water side cannot take what is left (capacity, or a compressor held off by its minimum
/// off time), the room air rises until the warm coil takes the rest.
fn air_handlers(cr: &CrahParams, q_air: f64, t_water: f64, t_db: f64, comp_ok: bool) -> AirStep {
    let m_air = (q_air / (AIR_CP_J_KG_K * cr.air_dt_k)).max(1e-3 * cr.m_air_design_kg_s);
    let x = m_air / cr.m_air_design_kg_s;
    let fan_w = cr.fan_design_w * x.powi(3);
    let c_air = m_air * AIR_CP_J_KG_K;
    let load = q_air + fan_w;
    let t_in = cr.supply_air_c + load / c_air;
    let a = counterflow_conductance(cr.ua_warm_design * x.powf(0.8), c_air, WARM_COIL_WATER_TO_AIR * c_air).max(1e-9);
    let f_free = free_cooling_fraction(cr, t_db);
    let cap = cr.chiller_cap_w * if comp_ok { 1.0 } else { f_free };
    let warm0 = (a * (t_in - t_water)).clamp(0.0, load);
    let (warm, chilled, rise) = if load - warm0 <= cap {
        (warm0, load - warm0, 0.0)
    } else {
        let rise = t_water - t_in + (load - cap) / a;
        (load - cap, cap, rise.max(0.0))
    };
    let free_w = if comp_ok { chilled * f_free } else { chilled };
    let mech = chilled - free_w;
    let cop = air_chiller_cop(cr, t_db);
    AirStep {
        fan_w,
        warm_w: warm,
        comp_w: mech / cop,
        cop,
        fc_w: free_w * cr.fc_fan_kw_per_kw,
        free_w,
        room_air_c: cr.supply_air_c + rise,
    }
}

/// Share of the air-side chilled-water load carried by free cooling at dry-bulb `t_db`: all of it
/// when the air is `fc_approach_k` below the chilled-water supply, none when it is that far
/// below the return, linear between.
fn free_cooling_fraction(cr: &CrahParams, t_db: f64) -> f64 {
    let t_ret = cr.chw_c + cr.chw_dt_k;
    ((t_ret - cr.fc_approach_k - t_db) / cr.chw_dt_k).clamp(0.0, 1.0)
}

/// COP of the air-side chiller's compressor at dry-bulb `t_db`: a fraction of Carnot between the
/// evaporating and the air-cooled condensing temperature, within [1, `cop_max`].
fn air_chiller_cop(cr: &CrahParams, t_db: f64) -> f64 {
    let t_evap = cr.chw_c - EVAPORATOR_APPROACH_K + KELVIN;
    let t_cond = t_db + cr.cond_approach_k + KELVIN;
    if t_cond > t_evap {
        (cr.carnot * t_evap / (t_cond - t_evap)).min(cr.cop_max)
    } else {
        cr.cop_max
    }
    .max(1.0)
}

/// Electrical power of an electrical room's cooling, W.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct RoomCooling {
    fan_w: f64,
    comp_w: f64,
    fc_w: f64,
}

impl RoomCooling {
    fn total_w(&self) -> f64 {
        self.fan_w + self.comp_w + self.fc_w
    }
}

/// Fan coils removing `q` W from the electrical rooms on the air-side chilled water: fans at
/// `fan_kw_per_kw`, the fans' heat included in the chilled-water load, which free cooling and the
/// compressor share as in the air handlers (quasi-steady; the rooms' own heat capacity and the
/// chiller's staging are not modelled for this load).
fn electrical_room_cooling(cr: &CrahParams, q: f64, t_db: f64, fan_kw_per_kw: f64) -> RoomCooling {
    let q = q.max(0.0);
    let fan_w = q * fan_kw_per_kw;
    let load = q + fan_w;
    let free = load * free_cooling_fraction(cr, t_db);
    RoomCooling {
        fan_w,
        comp_w: (load - free) / air_chiller_cop(cr, t_db),
        fc_w: free * cr.fc_fan_kw_per_kw,
    }
}

fn design_params(site: &Site, h: &coolplane_core::site::Hall) -> Result<(CduParams, RejectionParams), PlantError> {
    let d = &h.cdu;
    let q_d = d.design_load_kw * 1000.0;
    let f_design = pg25_lpm_to_kg_s(d.design_flow_lpm_per_kw * d.design_load_kw);
    let c_h = f_design * PG25_CP_J_KG_K;
    let m_cold = q_d / (h.facility.design_delta_t_k * WATER_CP_J_KG_K);
    let c_c = m_cold * WATER_CP_J_KG_K;
    let (c_min, c_max) = (c_h.min(c_c), c_h.max(c_c));
    let eps = q_d / (c_min * (q_d / c_h + d.hx_design_approach_k));
    let ntu = counterflow_ntu(eps, c_min / c_max).ok_or_else(|| {
        PlantError::Design(format!(
            "{}: a {} K CDU approach at {} kW with these flows needs an effectiveness of {eps:.3}, which no heat exchanger reaches",
            h.name, d.hx_design_approach_k, d.design_load_kw
        ))
    })?;
    let ua = ntu * c_min;
    let gpus_per_rack = (h.rack.nodes_per_rack * h.rack.gpus_per_node) as usize;
    let cdu = CduParams {
        f_design_kg_s: f_design,
        f_full_kg_s: f_design * d.flow_max_frac,
        f_min_kg_s: f_design * d.flow_min_frac,
        f_max_kg_s: f_design * d.flow_max_frac,
        m_cold_design_kg_s: m_cold,
        ua_design: ua,
        r_hot_design: 0.5 / ua,
        r_cold_design: 0.5 / ua,
        c_loop_j_k: d.loop_volume_m3 * PG25_DENSITY_KG_M3 * PG25_CP_J_KG_K,
        pump_design_w: d.pump_design_power_kw * 1000.0,
        gpu_ref_flow_kg_s: pg25_lpm_to_kg_s(site.cold_plate.ref_flow_lpm),
        gpus_per_rack,
    };
    let fw = &h.facility;
    let m_fac = m_cold * d.count as f64;
    let (cap_kw, approach, ratio, fan_kw, fan_min, tower, cycles, adiabatic) = match (&fw.dry_coolers, &fw.tower) {
        (Some(dc), _) => (
            dc.design_capacity_kw,
            dc.design_approach_k,
            dc.air_to_water_capacity_ratio,
            dc.fan_power_kw,
            dc.fan_min_speed,
            false,
            0.0,
            dc.adiabatic.as_ref().map(|a| (a.effectiveness, a.water_per_evaporated)),
        ),
        (None, Some(t)) => (
            t.design_capacity_kw,
            t.design_approach_k,
            1.5,
            t.fan_power_kw,
            0.15,
            true,
            t.cycles_of_concentration,
            None,
        ),
        (None, None) => return Err(PlantError::Design(format!("{}: no heat rejection", h.name))),
    };
    // Design point: the design heat at the design water flow leaves `approach` above the air.
    let c_w_design = cap_kw * 1000.0 / fw.design_delta_t_k;
    let eps_r = fw.design_delta_t_k / (fw.design_delta_t_k + approach);
    let ntu_r = counterflow_ntu(eps_r, 1.0 / ratio).ok_or_else(|| {
        PlantError::Design(format!(
            "{}: heat-rejection approach {approach} K is not reachable",
            h.name
        ))
    })?;
    let hyd = fw.hydraulics.as_ref().map(|hy| HydParams {
        static_m: hy.static_head_m,
        friction_m: hy.friction_head_m,
        shutoff_m: hy.shutoff_head_m,
        eta_bep: hy.bep_efficiency,
        eta_drive: hy.motor_drive_efficiency,
        ramp_kg_s2: if hy.ramp_s > 0.0 {
            m_fac / hy.ramp_s
        } else {
            f64::INFINITY
        },
        main_kg: hy.supply_main_m3 * WATER_DENSITY_KG_M3,
    });
    let crah = match &h.air.crah {
        Some(cr) => {
            // Design airflow: the hall's air-side heat with every GPU at TDP, at the servers' ΔT.
            let racks = (d.count * d.racks_per_cdu) as f64;
            let q_air = racks * coolplane_core::site::rack_design_power_w(site, h) * (1.0 - h.rack.heat_to_liquid);
            let m_air = (q_air / (AIR_CP_J_KG_K * cr.air_delta_t_k)).max(1e-3);
            let v = m_air / AIR_DENSITY_KG_M3;
            // Warm coil: at design airflow it cools the return air to `approach` above the water
            // when the water sits one server-ΔT below the return air; water-side capacity rate
            // 1.5 × the air's (coil selection practice), so C_min is the air.
            let eps = cr.air_delta_t_k / (cr.air_delta_t_k + cr.warm_coil_approach_k);
            let ntu = counterflow_ntu(eps, 1.0 / WARM_COIL_WATER_TO_AIR).ok_or_else(|| {
                PlantError::Design(format!(
                    "{}: a warm-coil approach of {} K is not reachable",
                    h.name, cr.warm_coil_approach_k
                ))
            })?;
            Some(CrahParams {
                supply_air_c: cr.supply_air_c,
                room_air_max_c: cr.room_air_max_c,
                air_dt_k: cr.air_delta_t_k,
                m_air_design_kg_s: m_air,
                fan_design_w: v * cr.fan_pressure_pa / cr.fan_efficiency,
                ua_warm_design: ntu * m_air * AIR_CP_J_KG_K,
                chw_c: cr.chilled_water_c,
                chw_dt_k: cr.chilled_water_delta_t_k,
                chiller_cap_w: cr.chiller_capacity_kw * 1000.0,
                carnot: cr.chiller_carnot_efficiency,
                cop_max: cr.chiller_cop_max,
                cond_approach_k: cr.condenser_approach_k,
                fc_approach_k: cr.free_cooling_approach_k,
                fc_fan_kw_per_kw: cr.free_cooling_fan_kw_per_kw,
            })
        }
        None => None,
    };
    let rej = RejectionParams {
        hyd,
        crah,
        design_approach_k: approach,
        c_air_full: ratio * c_w_design,
        ua_full: ntu_r * c_w_design,
        fan_full_w: fan_kw * 1000.0,
        fan_min_speed: fan_min,
        tower,
        cycles,
        adiabatic,
        c_facility_j_k: fw.loop_volume_m3 * WATER_DENSITY_KG_M3 * WATER_CP_J_KG_K,
        pump_design_w: fw.pump_design_power_kw * 1000.0,
        m_facility_design_kg_s: m_fac,
    };
    Ok((cdu, rej))
}
