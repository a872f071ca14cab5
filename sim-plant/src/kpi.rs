//! KPIs, computed by the plant from its true state (never by the controller).
//!
//! Definitions follow `scenarios-kpis.md`: PUE is ∫ utility-meter power / ∫ rack-input power over
//! the scored window (boundary in [`PUE_BOUNDARY`]); 15-minute figures use fixed 15-minute demand
//! intervals aligned with the start of scoring, as utility demand meters do.

use serde::{Deserialize, Serialize};

/// The PUE boundary printed with every PUE.
pub const PUE_BOUNDARY: &str =
    "utility meter (after transformer, UPS, PDU losses, all cooling, misc) / IT power at rack input";

const WINDOW_S: f64 = 900.0;

/// Energy flows and counters of one plant step, handed to the accumulator.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepFlows {
    /// Step length, s.
    pub dt_s: f64,
    /// Utility meter power, W.
    pub facility_w: f64,
    /// IT power at rack input, W.
    pub it_w: f64,
    /// CDU pumps, W.
    pub cdu_pumps_w: f64,
    /// Facility pumps, W.
    pub facility_pumps_w: f64,
    /// Heat-rejection fans (dry cooler / tower), W.
    pub rejection_fans_w: f64,
    /// Chiller compressors, W.
    pub chiller_w: f64,
    /// Air-handler fans, W.
    pub air_handler_fans_w: f64,
    /// Cooling of the electrical rooms (fan coils, chiller share, free-cooling fans), W.
    pub elec_room_cooling_w: f64,
    /// Heat-reuse heat pump, W.
    pub heat_pump_w: f64,
    /// Electrical losses (transformer, UPS, PDU), W.
    pub electrical_losses_w: f64,
    /// Misc constant load, W.
    pub misc_w: f64,
    /// Site power budget in force, W.
    pub budget_w: f64,
    /// Heat delivered to district heating, W.
    pub heat_reused_w: f64,
    /// Water consumed, L/s.
    pub water_l_per_s: f64,
    /// Heat into the liquid loops this step, J: IT energy at the meter (every watt a rack draws ends
    /// as heat in the liquid or in room air picked up by the air handlers) plus the electrical power
    /// of the CDU pumps, facility pumps and air-handler fans.
    pub heat_in_j: f64,
    /// Heat out of the liquid loops this step, J, each term from its own device: the air side of
    /// every rejection device (ε-NTU with its own temperatures and flows), chiller evaporators
    /// (compressor power × COP) and heat-pump evaporators (heat-pump power × (COP − 1)).
    pub heat_out_j: f64,
    /// Residual of the CDU loops this step, J: cold-plate heat + pump heat − HX heat (ε-NTU from
    /// each HX's own temperatures and flows) − change of the CDU loops' stored heat.
    pub cdu_residual_j: f64,
    /// Residual of the facility loops this step, J: HX heat + air-side heat + pump and air-handler
    /// heat − rejected, chilled and reused heat − change of the facility loops' stored heat.
    pub facility_residual_j: f64,
    /// Residual of the immersion tanks this step, J: boards' heat into the pools − heat condensed
    /// on the coils (each coil's ε-NTU) − vented and seal-loss vapour heat − change of the pools'
    /// stored heat (from pool temperatures); 0 without tanks.
    pub tank_residual_j: f64,
    /// Residual of the room air this step, J (halls with modelled air handlers): air-side heat of
    /// the racks (IT meter − heat into the liquid) + air-handler fan heat − heat taken by the warm
    /// coils (ε-NTU) − heat taken by the chilled-water coils (the air-side chillers' evaporator and
    /// free-cooling heat, from their own power); 0 otherwise.
    pub air_residual_j: f64,
    /// Hottest supply (room) air of the halls with modelled air handlers this step, °C (NaN if none).
    pub room_air_c: f64,
    /// Σ over halls of (supply air − room-air limit)⁺ × dt this step, K·s.
    pub room_air_over_k_s: f64,
    /// IT power by the rack path, W: Σ over racks of the GPUs' own power telemetry plus node and
    /// switch power, summed apart from the utility-meter path ([`StepFlows::it_w`]).
    pub it_rack_path_w: f64,
    /// GPUs at or above slowdown (hardware slowdown in force) this step.
    pub throttled_gpus: u64,
    /// GPUs within 5 K of slowdown this step.
    pub near_throttle_gpus: u64,
    /// GPU work done this step, GPU-s.
    pub work_done_gpu_s: f64,
    /// GPU work demanded (no caps, no throttling), GPU-s.
    pub work_demanded_gpu_s: f64,
    /// Two-phase immersion fluid lost this step (relief venting, seals, breathing), kg.
    pub fluid_lost_kg: f64,
    /// Of which vented through tank relief valves, kg.
    pub fluid_vented_kg: f64,
    /// Highest tank pressure above atmospheric this step, kPa (0 without tanks).
    pub tank_max_gauge_kpa: f64,
}

/// Running sums over the scored window.
#[derive(Debug, Clone, Default)]
pub struct KpiAccumulator {
    scored_s: f64,
    facility_j: f64,
    it_j: f64,
    cdu_pumps_j: f64,
    facility_pumps_j: f64,
    rejection_fans_j: f64,
    chiller_j: f64,
    air_handler_fans_j: f64,
    elec_room_cooling_j: f64,
    heat_pump_j: f64,
    electrical_losses_j: f64,
    misc_j: f64,
    heat_reused_j: f64,
    water_l: f64,
    heat_in_j: f64,
    heat_out_j: f64,
    cdu_residual_j: f64,
    facility_residual_j: f64,
    tank_residual_j: f64,
    air_residual_j: f64,
    room_air_max_c: f64,
    room_air_over_k_s: f64,
    it_rack_path_j: f64,
    stored_start_j: f64,
    throttle_gpu_s: f64,
    near_throttle_gpu_s: f64,
    work_done: f64,
    work_demanded: f64,
    budget_exceed_j: f64,
    exceed_run_s: f64,
    exceed_longest_s: f64,
    window_elapsed_s: f64,
    window_facility_j: f64,
    window_it_j: f64,
    window_facility_kw: Vec<f64>,
    window_pue: Vec<f64>,
    fluid_lost_kg: f64,
    fluid_vented_kg: f64,
    tank_max_gauge_kpa: f64,
    /// GPU shutdowns counted by the plant.
    pub gpu_shutdowns: u64,
    /// Jobs failed (counted by the cluster scheduler).
    pub failed_jobs: u64,
    /// Work preempted jobs threw away (they restart from the beginning), GPU-s (counted by the
    /// cluster scheduler, at full speed: an upper bound).
    pub work_thrown_away: f64,
    /// Setpoint writes received.
    pub setpoint_writes: u64,
    /// Setpoint writes received by each CDU (setpoints are kept in each device's own
    /// non-volatile memory, so its endurance is spent per device).
    pub cdu_writes: Vec<u64>,
    /// Setpoint and mode writes received by each hall's facility water system.
    pub facility_writes: Vec<u64>,
    /// Starts of the heat-rejection fans (after a stop).
    pub rejection_fan_starts: u64,
    /// Starts of chiller stages (trim chiller and air-side chiller compressors).
    pub chiller_starts: u64,
    /// Setpoint writes rejected as out of range.
    pub rejected_writes: u64,
    /// Σ|Δ setpoint| of CDU supply setpoints, K.
    pub supply_setpoint_travel_k: f64,
    /// Largest move of a CDU's supply setpoint in force by one write, per minute since it last
    /// moved (at least one minute), K/min.
    pub supply_setpoint_max_rate_k_per_min: f64,
    /// Σ|Δ setpoint| of CDU flow setpoints, L/min.
    pub flow_setpoint_travel_lpm: f64,
    /// Σ|Δ setpoint| of facility supply setpoints, K.
    pub facility_setpoint_travel_k: f64,
    /// Max |CDU supply − reference| at every step, K; the reference follows the setpoint at
    /// most 1 K/min (`SUPPLY_REF_RAMP_K_PER_S`).
    pub supply_temp_max_dev_k: f64,
    /// Max true GPU die temperature seen, °C.
    pub gpu_temp_max_c: f64,
}

impl KpiAccumulator {
    /// A fresh accumulator; `stored_j` is the thermal energy stored in the loops now.
    pub fn new(stored_j: f64) -> Self {
        Self {
            stored_start_j: stored_j,
            ..Default::default()
        }
    }

    /// Count a setpoint write received by CDU `i`.
    pub fn cdu_write(&mut self, i: usize) {
        Self::count(&mut self.cdu_writes, i);
    }

    /// Count a setpoint or mode write received by hall `i`'s facility water system.
    pub fn facility_write(&mut self, i: usize) {
        Self::count(&mut self.facility_writes, i);
    }

    fn count(v: &mut Vec<u64>, i: usize) {
        if v.len() <= i {
            v.resize(i + 1, 0);
        }
        v[i] += 1;
    }

    /// Add one step.
    pub fn add(&mut self, f: &StepFlows) {
        let dt = f.dt_s;
        self.scored_s += dt;
        self.facility_j += f.facility_w * dt;
        self.it_j += f.it_w * dt;
        self.cdu_pumps_j += f.cdu_pumps_w * dt;
        self.facility_pumps_j += f.facility_pumps_w * dt;
        self.rejection_fans_j += f.rejection_fans_w * dt;
        self.chiller_j += f.chiller_w * dt;
        self.air_handler_fans_j += f.air_handler_fans_w * dt;
        self.elec_room_cooling_j += f.elec_room_cooling_w * dt;
        self.heat_pump_j += f.heat_pump_w * dt;
        self.electrical_losses_j += f.electrical_losses_w * dt;
        self.misc_j += f.misc_w * dt;
        self.heat_reused_j += f.heat_reused_w * dt;
        self.water_l += f.water_l_per_s * dt;
        self.heat_in_j += f.heat_in_j;
        self.heat_out_j += f.heat_out_j;
        self.cdu_residual_j += f.cdu_residual_j;
        self.facility_residual_j += f.facility_residual_j;
        self.tank_residual_j += f.tank_residual_j;
        self.air_residual_j += f.air_residual_j;
        if f.room_air_c.is_finite() {
            // Room air is never below 10 °C (site validation), so 0 is a safe start.
            self.room_air_max_c = self.room_air_max_c.max(f.room_air_c);
        }
        self.room_air_over_k_s += f.room_air_over_k_s;
        self.it_rack_path_j += f.it_rack_path_w * dt;
        self.throttle_gpu_s += f.throttled_gpus as f64 * dt;
        self.near_throttle_gpu_s += f.near_throttle_gpus as f64 * dt;
        self.work_done += f.work_done_gpu_s;
        self.work_demanded += f.work_demanded_gpu_s;
        self.fluid_lost_kg += f.fluid_lost_kg;
        self.fluid_vented_kg += f.fluid_vented_kg;
        self.tank_max_gauge_kpa = self.tank_max_gauge_kpa.max(f.tank_max_gauge_kpa);
        if f.facility_w > f.budget_w {
            self.budget_exceed_j += (f.facility_w - f.budget_w) * dt;
            self.exceed_run_s += dt;
            self.exceed_longest_s = self.exceed_longest_s.max(self.exceed_run_s);
        } else {
            self.exceed_run_s = 0.0;
        }
        // Fixed 15-minute demand intervals (a step longer than the window is its own window).
        self.window_elapsed_s += dt;
        self.window_facility_j += f.facility_w * dt;
        self.window_it_j += f.it_w * dt;
        if self.window_elapsed_s >= WINDOW_S - 1e-6 {
            self.window_facility_kw
                .push(self.window_facility_j / self.window_elapsed_s / 1000.0);
            if self.window_it_j > 0.0 {
                self.window_pue.push(self.window_facility_j / self.window_it_j);
            }
            self.window_elapsed_s = 0.0;
            self.window_facility_j = 0.0;
            self.window_it_j = 0.0;
        }
    }

    /// Seconds scored so far.
    pub fn scored_s(&self) -> f64 {
        self.scored_s
    }

    /// The KPI report; `stored_now_j` is the thermal energy stored in the loops now.
    pub fn report(&self, stored_now_j: f64) -> Kpis {
        const J_PER_KWH: f64 = 3.6e6;
        let it_kwh = self.it_j / J_PER_KWH;
        let facility_kwh = self.facility_j / J_PER_KWH;
        let cooling_j = self.cdu_pumps_j
            + self.facility_pumps_j
            + self.rejection_fans_j
            + self.chiller_j
            + self.air_handler_fans_j
            + self.elec_room_cooling_j;
        let stored = stored_now_j - self.stored_start_j;
        let imbalance = self.heat_in_j - self.heat_out_j - stored;
        let mut sorted = self.window_pue.clone();
        sorted.sort_by(f64::total_cmp);
        let p95 = if sorted.is_empty() {
            f64::NAN
        } else {
            sorted[((sorted.len() as f64 * 0.95).ceil() as usize).clamp(1, sorted.len()) - 1]
        };
        let peak = self.window_facility_kw.iter().copied().fold(f64::NAN, f64::max);
        let peak = if peak.is_nan() && self.scored_s > 0.0 {
            self.facility_j / self.scored_s / 1000.0
        } else {
            peak
        };
        Kpis {
            scored_s: self.scored_s,
            pue: ratio(self.facility_j, self.it_j),
            pue_p95_15min: p95,
            pue_boundary: PUE_BOUNDARY.to_string(),
            it_energy_kwh: it_kwh,
            facility_energy_kwh: facility_kwh,
            cooling_energy_kwh: cooling_j / J_PER_KWH,
            cdu_pump_energy_kwh: self.cdu_pumps_j / J_PER_KWH,
            facility_pump_energy_kwh: self.facility_pumps_j / J_PER_KWH,
            rejection_fan_energy_kwh: self.rejection_fans_j / J_PER_KWH,
            chiller_energy_kwh: self.chiller_j / J_PER_KWH,
            air_handler_energy_kwh: self.air_handler_fans_j / J_PER_KWH,
            electrical_room_cooling_energy_kwh: self.elec_room_cooling_j / J_PER_KWH,
            heat_pump_energy_kwh: self.heat_pump_j / J_PER_KWH,
            electrical_loss_energy_kwh: self.electrical_losses_j / J_PER_KWH,
            misc_energy_kwh: self.misc_j / J_PER_KWH,
            throttle_gpu_s: self.throttle_gpu_s,
            near_throttle_gpu_s: self.near_throttle_gpu_s,
            gpu_shutdowns: self.gpu_shutdowns,
            failed_jobs: self.failed_jobs,
            work_done_gpu_s: self.work_done,
            work_thrown_away_gpu_s: self.work_thrown_away,
            work_demanded_gpu_s: self.work_demanded,
            work_lost_pct: if self.work_demanded > 0.0 {
                100.0 * (1.0 - self.work_done / self.work_demanded)
            } else {
                0.0
            },
            budget_exceed_kwh: self.budget_exceed_j / J_PER_KWH,
            budget_exceed_longest_s: self.exceed_longest_s,
            peak_15min_kw: peak,
            water_l: self.water_l,
            wue_l_per_kwh: ratio(self.water_l, it_kwh),
            heat_reused_kwh: self.heat_reused_j / J_PER_KWH,
            ere: ratio(self.facility_j - self.heat_reused_j, self.it_j),
            energy_balance_error_pct: if self.heat_in_j > 0.0 {
                100.0
                    * imbalance
                        .abs()
                        .max(self.cdu_residual_j.abs())
                        .max(self.facility_residual_j.abs())
                        .max(self.tank_residual_j.abs())
                        .max(self.air_residual_j.abs())
                    / self.heat_in_j
            } else {
                0.0
            },
            ledger_heat_in_kwh: self.heat_in_j / J_PER_KWH,
            ledger_heat_out_kwh: self.heat_out_j / J_PER_KWH,
            ledger_stored_kwh: stored / J_PER_KWH,
            ledger_cdu_residual_kwh: self.cdu_residual_j / J_PER_KWH,
            ledger_facility_residual_kwh: self.facility_residual_j / J_PER_KWH,
            ledger_tank_residual_kwh: self.tank_residual_j / J_PER_KWH,
            ledger_air_residual_kwh: self.air_residual_j / J_PER_KWH,
            room_air_max_c: self.room_air_max_c,
            room_air_over_limit_k_h: self.room_air_over_k_s / 3600.0,
            chiller_starts: self.chiller_starts,
            it_rack_path_kwh: self.it_rack_path_j / J_PER_KWH,
            it_meter_error_pct: if self.it_j > 0.0 {
                100.0 * (self.it_j - self.it_rack_path_j).abs() / self.it_j
            } else {
                0.0
            },
            supply_temp_max_dev_k: self.supply_temp_max_dev_k,
            setpoint_writes: self.setpoint_writes,
            cdu_setpoint_writes: self.cdu_writes.iter().sum(),
            facility_setpoint_writes: self.facility_writes.iter().sum(),
            setpoint_writes_max_cdu: self.cdu_writes.iter().copied().max().unwrap_or(0),
            setpoint_writes_max_facility: self.facility_writes.iter().copied().max().unwrap_or(0),
            rejection_fan_starts: self.rejection_fan_starts,
            rejected_writes: self.rejected_writes,
            supply_setpoint_travel_k: self.supply_setpoint_travel_k,
            supply_setpoint_max_rate_k_per_min: self.supply_setpoint_max_rate_k_per_min,
            flow_setpoint_travel_lpm: self.flow_setpoint_travel_lpm,
            facility_setpoint_travel_k: self.facility_setpoint_travel_k,
            gpu_temp_max_c: self.gpu_temp_max_c,
            fluid_loss_kg: self.fluid_lost_kg,
            fluid_vented_kg: self.fluid_vented_kg,
            tank_pressure_max_gauge_kpa: self.tank_max_gauge_kpa,
        }
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

/// The plant's KPI report over the scored window (units in the names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kpis {
    /// Length of the scored window, s.
    pub scored_s: f64,
    /// Energy-weighted PUE over the window.
    pub pue: f64,
    /// 95th percentile of the 15-minute PUEs.
    pub pue_p95_15min: f64,
    /// What the PUE divides by what.
    pub pue_boundary: String,
    /// IT energy at rack input, kWh.
    pub it_energy_kwh: f64,
    /// Total energy at the utility meter, kWh.
    pub facility_energy_kwh: f64,
    /// Cooling energy (CDU pumps + facility pumps + rejection fans + chiller + air handlers), kWh.
    pub cooling_energy_kwh: f64,
    /// CDU pumps, kWh.
    pub cdu_pump_energy_kwh: f64,
    /// Facility pumps, kWh.
    pub facility_pump_energy_kwh: f64,
    /// Dry-cooler / tower fans, kWh.
    pub rejection_fan_energy_kwh: f64,
    /// Chiller, kWh.
    pub chiller_energy_kwh: f64,
    /// Air-handler fans, kWh.
    pub air_handler_energy_kwh: f64,
    /// Cooling of the electrical rooms, kWh (part of `cooling_energy_kwh`).
    #[serde(default)]
    pub electrical_room_cooling_energy_kwh: f64,
    /// Heat-reuse heat pump, kWh (not cooling; inside the facility total).
    pub heat_pump_energy_kwh: f64,
    /// Transformer, UPS and PDU losses, kWh.
    pub electrical_loss_energy_kwh: f64,
    /// Lighting and misc, kWh.
    pub misc_energy_kwh: f64,
    /// Σ over GPUs of time in hardware slowdown, GPU-s.
    pub throttle_gpu_s: f64,
    /// Σ over GPUs of time within 5 K of slowdown, GPU-s.
    pub near_throttle_gpu_s: f64,
    /// GPU thermal shutdowns.
    pub gpu_shutdowns: u64,
    /// Jobs failed because a GPU shut down.
    pub failed_jobs: u64,
    /// GPU work done, GPU-s.
    pub work_done_gpu_s: f64,
    /// Of it, the work of jobs preempted through the power-budget ledger, which restart from the
    /// beginning: done, and thrown away, GPU-s (at full speed, an upper bound; 0 without leases).
    #[serde(default)]
    pub work_thrown_away_gpu_s: f64,
    /// GPU work demanded with no caps and no throttling, GPU-s.
    pub work_demanded_gpu_s: f64,
    /// Lost work, % of demanded.
    pub work_lost_pct: f64,
    /// Energy above the site budget, kWh.
    pub budget_exceed_kwh: f64,
    /// Longest continuous budget exceedance, s.
    pub budget_exceed_longest_s: f64,
    /// Peak 15-minute average facility power, kW.
    pub peak_15min_kw: f64,
    /// Water consumed (adiabatic, tower), L.
    pub water_l: f64,
    /// Water usage effectiveness, L/kWh of IT energy.
    pub wue_l_per_kwh: f64,
    /// Heat delivered for reuse, kWh.
    pub heat_reused_kwh: f64,
    /// Energy reuse effectiveness.
    pub ere: f64,
    /// Energy-ledger error over the window, %: the largest of |heat in − heat out − stored|, the
    /// CDU-loop, facility-loop and immersion-tank residuals, over heat in. Every term comes from its
    /// own path (see [`StepFlows`]), so a lost or double-counted watt shows here.
    pub energy_balance_error_pct: f64,
    /// Ledger: heat into the liquid loops (IT meter + pump and air-handler power), kWh.
    #[serde(default)]
    pub ledger_heat_in_kwh: f64,
    /// Ledger: heat out (rejection devices' air side, chiller and heat-pump evaporators), kWh.
    #[serde(default)]
    pub ledger_heat_out_kwh: f64,
    /// Ledger: change of heat stored in all loops (from loop temperatures), kWh.
    #[serde(default)]
    pub ledger_stored_kwh: f64,
    /// Ledger: residual of the CDU loops, kWh.
    #[serde(default)]
    pub ledger_cdu_residual_kwh: f64,
    /// Ledger: residual of the facility loops, kWh.
    #[serde(default)]
    pub ledger_facility_residual_kwh: f64,
    /// Ledger: residual of the immersion tanks' pools, kWh (0 without tanks).
    #[serde(default)]
    pub ledger_tank_residual_kwh: f64,
    /// Ledger: residual of the room air of halls with modelled air handlers, kWh.
    #[serde(default)]
    pub ledger_air_residual_kwh: f64,
    /// Hottest supply (room) air over the window, °C (0 where no hall models its air handlers).
    #[serde(default)]
    pub room_air_max_c: f64,
    /// Room air above its limit, K·h (Σ over halls).
    #[serde(default)]
    pub room_air_over_limit_k_h: f64,
    /// Starts of chiller stages (trim chiller and air-side chillers).
    #[serde(default)]
    pub chiller_starts: u64,
    /// IT energy by the rack path (GPU telemetry + node and switch power per rack), kWh.
    #[serde(default)]
    pub it_rack_path_kwh: f64,
    /// |IT meter − rack path| / IT meter over the window, %.
    #[serde(default)]
    pub it_meter_error_pct: f64,
    /// Max |CDU supply − reference| at every step, K; the reference follows the setpoint at
    /// most 1 K/min (`SUPPLY_REF_RAMP_K_PER_S`).
    pub supply_temp_max_dev_k: f64,
    /// Setpoint writes received by the devices.
    pub setpoint_writes: u64,
    /// Of them, the setpoint writes received by the CDUs, summed from each CDU's own count (with
    /// `facility_setpoint_writes`, the total again by another path).
    #[serde(default)]
    pub cdu_setpoint_writes: u64,
    /// Of them, the setpoint and mode writes received by the facility water systems, summed
    /// from each one's own count.
    #[serde(default)]
    pub facility_setpoint_writes: u64,
    /// The most setpoint writes any one CDU received: the wear on the most-written device's
    /// non-volatile memory.
    #[serde(default)]
    pub setpoint_writes_max_cdu: u64,
    /// The most setpoint and mode writes any one hall's facility water system received.
    #[serde(default)]
    pub setpoint_writes_max_facility: u64,
    /// Starts of the heat-rejection fans after a stop (minimum on/off time `FAN_MIN_ON_OFF_S`).
    #[serde(default)]
    pub rejection_fan_starts: u64,
    /// Setpoint writes rejected as out of range.
    pub rejected_writes: u64,
    /// Actuator travel: Σ|Δ CDU supply setpoint|, K.
    pub supply_setpoint_travel_k: f64,
    /// Largest move of a CDU's supply setpoint in force by one write, per minute since it last
    /// moved (counted as at least one minute), K/min: a controller that restarts or resumes with
    /// a jump shows here.
    #[serde(default)]
    pub supply_setpoint_max_rate_k_per_min: f64,
    /// Actuator travel: Σ|Δ CDU flow setpoint|, L/min.
    pub flow_setpoint_travel_lpm: f64,
    /// Actuator travel: Σ|Δ facility supply setpoint|, K.
    pub facility_setpoint_travel_k: f64,
    /// Hottest true GPU die temperature in the window, °C.
    pub gpu_temp_max_c: f64,
    /// Two-phase immersion: dielectric fluid lost (relief venting, seals, breathing), kg.
    #[serde(default)]
    pub fluid_loss_kg: f64,
    /// Of which vented through tank relief valves, kg.
    #[serde(default)]
    pub fluid_vented_kg: f64,
    /// Highest tank pressure above atmospheric in the window, kPa (0 without tanks).
    #[serde(default)]
    pub tank_pressure_max_gauge_kpa: f64,
}

impl Kpis {
    /// Work done and kept, GPU-h: done less what preempted jobs threw away.
    pub fn useful_work_gpu_h(&self) -> f64 {
        (self.work_done_gpu_s - self.work_thrown_away_gpu_s).max(0.0) / 3600.0
    }

    /// The verdict: facility energy per GPU-hour of work kept, kWh (work a preempted job threw
    /// away is not work done for the energy spent on it).
    pub fn facility_kwh_per_gpu_h(&self) -> f64 {
        self.facility_energy_kwh / self.useful_work_gpu_h()
    }
}
