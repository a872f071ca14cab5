//! Site description: site → halls → CDUs → racks → nodes → GPUs, the facility water system, heat
//! rejection and the electrical chain, read from TOML and validated.
//!
//! Every field carries its unit in its name (`_c`, `_w`, `_kw`, `_lpm`, `_s`, `_pct`, `_k`).
//! Validation errors name the offending field by its path (`halls[0].cdu.capacity_kw`) and value.
//! Three reference sites are built in ([`builtin_site`]) and shipped as files under `sites/`.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Names of the reference sites built into the binary.
pub const BUILTIN_SITES: [&str; 4] = ["hall-10k", "supernode-640", "campus-100k", "supernode-2pic"];

/// Most accelerators a site may hold (ten `campus-100k` campuses).
pub const MAX_SITE_GPUS: u64 = 1_000_000;

/// A site description could not be read or is not physically valid.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SiteError {
    /// The TOML text did not parse or did not match the schema.
    #[error("site file {source_name}: {message}")]
    Parse {
        /// File name or built-in name.
        source_name: String,
        /// What the TOML parser said (with line and column).
        message: String,
    },
    /// A field holds a value outside what the physics allows.
    #[error("site field `{field}` = {value}: {reason}")]
    Invalid {
        /// Path of the field, e.g. `halls[0].cdu.capacity_kw`.
        field: String,
        /// The offending value as written.
        value: String,
        /// Why it is not accepted.
        reason: String,
    },
    /// No built-in site of that name.
    #[error("unknown built-in site `{0}` (built-in sites: hall-10k, supernode-640, campus-100k, supernode-2pic; or give a path to a .toml file)")]
    UnknownBuiltin(String),
}

/// The whole site.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Site {
    /// Site identity and contract.
    pub site: SiteInfo,
    /// The accelerator model installed on this site.
    pub gpu: GpuModel,
    /// Cold plates on the accelerators.
    pub cold_plate: ColdPlate,
    /// Utility-to-rack electrical chain.
    pub electrical: Electrical,
    /// Measurement chain of the devices.
    #[serde(default)]
    pub sensors: SensorSpec,
    /// The halls (each with its own facility water system).
    pub halls: Vec<Hall>,
}

/// Site identity, contract and miscellaneous loads.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SiteInfo {
    /// Short name, used in topics and reports.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Site power budget at the utility meter (contract or grid limit), kW.
    pub power_budget_kw: f64,
    /// Lighting, offices, security: constant load after the transformer, kW.
    pub misc_load_kw: f64,
}

/// Accelerator model limits and power behaviour.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GpuModel {
    /// Marketing name (B200, H100, ...).
    pub name: String,
    /// Thermal design power, W (the default and maximum power limit).
    pub tdp_w: f64,
    /// Idle (static) power at 60 °C die temperature, W.
    pub idle_w: f64,
    /// Lowest settable power limit, W.
    pub min_cap_w: f64,
    /// Leakage growth of the static part, per kelvin above 60 °C (β). Read as the exponential
    /// coefficient κ when `leakage_exp_per_k` is not given (same slope at 60 °C).
    pub leakage_per_k: f64,
    /// Exponential leakage coefficient κ, 1/K: the die's leakage power is
    /// `leakage_w_at_60c · e^(κ·(T_die − 60 °C))` (parameters and sources: docs/plant-physics.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leakage_exp_per_k: Option<f64>,
    /// Leakage power of the GPU die at 60 °C, W (part of `idle_w`; the rest of the idle power does
    /// not depend on temperature). Default: all of `idle_w`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leakage_w_at_60c: Option<f64>,
    /// Performance under a power cap as a knee curve `[shallow slope, knee power ratio, deep
    /// slope]` fitted to the Zeus sweeps (`coolplane fit-perf`); replaces `perf_alpha` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perf_knee: Option<[f64; 3]>,
    /// Exponent α of perf = (P/P_dem)^α under a power cap (fitted from the Zeus sweeps).
    pub perf_alpha: f64,
    /// Maximum operating temperature, °C.
    pub max_operating_c: f64,
    /// Hardware slowdown temperature, °C (clocks halve at or above it).
    pub slowdown_c: f64,
    /// Shutdown temperature, °C (the GPU stops; its job fails).
    pub shutdown_c: f64,
    /// Slowdown ends this many kelvin below the slowdown temperature.
    pub slowdown_hysteresis_k: f64,
    /// Die thermal time constant, s.
    pub tau_s: f64,
}

impl GpuModel {
    /// Exponential leakage coefficient κ, 1/K.
    pub fn leakage_kappa(&self) -> f64 {
        self.leakage_exp_per_k.unwrap_or(self.leakage_per_k)
    }

    /// Leakage power at 60 °C, W.
    pub fn leakage_at_60c_w(&self) -> f64 {
        self.leakage_w_at_60c.unwrap_or(self.idle_w)
    }

    /// Static power (idle, no work) at die temperature `t_die_c`, W:
    /// `idle_w − L₆₀ + L₆₀·e^(κ·(T − 60))`.
    pub fn static_power_w(&self, t_die_c: f64) -> f64 {
        let l = self.leakage_at_60c_w();
        self.idle_w - l + l * (self.leakage_kappa() * (t_die_c - 60.0)).exp()
    }

    /// Relative performance of a GPU drawing the fraction `x` of the power it demands: the knee
    /// curve when characterised, else `x^α`; 1 at `x ≥ 1`.
    pub fn perf_at_power_ratio(&self, x: f64) -> f64 {
        let x = x.min(1.0);
        match self.perf_knee {
            Some([s1, knee, s2]) => {
                let p = if x >= knee {
                    1.0 - s1 * (1.0 - x)
                } else {
                    1.0 - s1 * (1.0 - knee) - s2 * (knee - x)
                };
                p.max(0.0)
            }
            None => x.max(0.0).powf(self.perf_alpha),
        }
    }

    /// (power W, relative speed) of a GPU at die temperature `t_die_c`, utilisation `util` and
    /// power limit `cap_w`: it demands its static power plus `util·(TDP − idle)`; above the
    /// limit it draws the limit and slows down on [`GpuModel::perf_at_power_ratio`]. (The
    /// simulated plant's per-GPU kernel computes the same in `f32`; this is the `f64` reference
    /// a controller reasons with.)
    pub fn power_and_speed(&self, t_die_c: f64, util: f64, cap_w: f64) -> (f64, f64) {
        let demand = self.static_power_w(t_die_c) + util * (self.tdp_w - self.idle_w);
        if demand > cap_w && demand > 0.0 {
            (cap_w, self.perf_at_power_ratio(cap_w / demand))
        } else {
            (demand, 1.0)
        }
    }
}

/// Cold-plate thermal resistance model `R(ṁ) = R_cond,i + R_conv,ref·(ṁ_ref/ṁ)^n + 1/(2·ṁ·c_p)`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ColdPlate {
    /// Mean conduction + interface resistance, K/W.
    pub r_cond_k_per_w: f64,
    /// Standard deviation of the per-GPU conduction resistance, % of the mean.
    pub r_cond_spread_pct: f64,
    /// Convective resistance at the reference flow, K/W.
    pub r_conv_ref_k_per_w: f64,
    /// Reference flow through one GPU's plate, L/min.
    pub ref_flow_lpm: f64,
    /// Convective exponent (Dittus–Boelter: 0.8).
    pub conv_exponent: f64,
}

/// Electrical chain from the utility meter to the rack input.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Electrical {
    /// Description printed in reports (`modern: eco-mode UPS ...`).
    pub chain: String,
    /// Transformer rating, kVA (treated as kW at unity power factor).
    pub transformer_rating_kva: f64,
    /// No-load loss, % of rating.
    pub transformer_no_load_loss_pct: f64,
    /// Load loss at rated load, % of rating (scales with load²).
    pub transformer_load_loss_pct: f64,
    /// UPS rating, kW.
    pub ups_rating_kw: f64,
    /// UPS efficiency curve: `[load fraction, efficiency]` pairs, ascending load.
    pub ups_efficiency_curve: Vec<[f64; 2]>,
    /// PDU / busway efficiency (0–1).
    pub pdu_efficiency: f64,
    /// Cooling of the electrical rooms (UPS and switchgear rooms): where the chain's losses that
    /// are indoors are removed. Absent: those losses leave the model as heat with no cooling cost.
    #[serde(default)]
    pub room_cooling: Option<ElectricalRoomCooling>,
}

/// Cooling of the electrical rooms. NREL ESIF counts "fan coils that support the data center
/// electrical rooms" in its PUE: the UPS's losses (and a dry-type transformer's, when it stands
/// indoors) are heat in a closed room, removed by chilled-water fan coils. The chilled water
/// comes from the first hall's air-side chiller plant (same free cooling and COP, `air.crah`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ElectricalRoomCooling {
    /// The UPS stands in a cooled room (its losses are cooled).
    pub ups_indoors: bool,
    /// The transformers stand in a cooled room (dry-type indoors); false for pad-mounted ones
    /// outdoors, whose losses go to the outside air.
    pub transformer_indoors: bool,
    /// Fan-coil fan power per kW of heat removed, kW/kW.
    pub fan_kw_per_kw: f64,
}

/// Measurement chain: noise, delay and quantisation of the plant's sensors.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SensorSpec {
    /// Temperature noise (1 σ), K.
    pub temp_noise_k: f64,
    /// Temperature bias spread (1 σ, fixed per sensor), K.
    pub temp_bias_k: f64,
    /// Flow noise (1 σ), % of reading.
    pub flow_noise_pct: f64,
    /// Power noise (1 σ), % of reading.
    pub power_noise_pct: f64,
    /// Transport/sampling delay of CDU and facility sensors, s.
    pub delay_s: f64,
    /// GPU die sensor bias spread (1 σ, fixed per GPU), K.
    pub gpu_temp_bias_k: f64,
}

impl Default for SensorSpec {
    fn default() -> Self {
        Self {
            temp_noise_k: 0.1,
            temp_bias_k: 0.15,
            flow_noise_pct: 1.0,
            power_noise_pct: 0.5,
            delay_s: 2.0,
            gpu_temp_bias_k: 0.5,
        }
    }
}

/// One hall (or `count` identical halls): racks, CDUs and a facility water system.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Hall {
    /// Name (a suffix `-N` is added when `count > 1`).
    pub name: String,
    /// Number of identical halls described by this entry.
    #[serde(default = "one")]
    pub count: u32,
    /// Rack template.
    pub rack: Rack,
    /// CDU template and count.
    pub cdu: Cdu,
    /// Facility water system and heat rejection.
    pub facility: Facility,
    /// Air handlers for the heat that does not go into the liquid.
    pub air: AirHandling,
    /// Two-phase immersion (optional): each rack is a tank of boiling dielectric fluid and each
    /// CDU is that tank's condenser-water skid (one rack per CDU). See [`Immersion`].
    #[serde(default)]
    pub immersion: Option<Immersion>,
}

/// Two-phase immersion tanks of a hall (plant-model.md §12).
///
/// With this section each rack of the hall is a sealed tank in which the boards boil a
/// dielectric fluid, and the hall's `[cdu]` describes the tank's condenser-water skid: its pumps
/// push water (the CDU's secondary loop) through a coil in the vapour space, its heat exchanger
/// and valve hold the condenser-water supply temperature against facility water. The condenser
/// water supply temperature and flow are the skid's setpoints, on the wire like a CDU's. The
/// `[cold_plate]` section of the site does not apply to immersion halls.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Immersion {
    /// Fluid: `novec-649`, `hfe-7100` or `hfe-7000` (property data: `coolplane_core::dielectric`).
    pub fluid: String,
    /// Fluid charge per tank, kg.
    pub fluid_mass_kg: f64,
    /// Below this charge the top boards are uncovered and dry out, kg.
    pub min_fluid_mass_kg: f64,
    /// Heat capacity of the submerged hardware and the tank shell per tank, kJ/K.
    pub hardware_heat_capacity_kj_per_k: f64,
    /// Boiling surface per accelerator (lid or boiler plate), cm².
    pub boiling_area_cm2: f64,
    /// Nucleate-boiling wall superheat at the reference heat flux, K.
    pub superheat_ref_k: f64,
    /// Reference heat flux of `superheat_ref_k`, W/cm².
    pub superheat_ref_w_per_cm2: f64,
    /// Exponent n of the boiling curve q ∝ ΔT^n (Rohsenow: 3).
    pub boiling_exponent: f64,
    /// Critical heat flux of the surface / Zuber's flat-plate value (coatings: 1.5–2).
    pub chf_enhancement: f64,
    /// Film-boiling heat-transfer coefficient once a surface has dried out, W/(m²·K).
    pub film_boiling_w_per_m2_k: f64,
    /// Die-to-boiling-surface resistance of the package, mean, K/W.
    pub package_r_k_per_w: f64,
    /// Standard deviation of the package resistance, % of the mean (seeded per accelerator).
    pub package_r_spread_pct: f64,
    /// Condenser coil UA at design condenser-water flow, kW/K.
    pub condenser_ua_kw_per_k: f64,
    /// Share of the coil's thermal resistance on the water side at design flow (0–1); it scales
    /// with flow^-0.8, the condensing side does not.
    pub condenser_water_side_frac: f64,
    /// Relief valve opening pressure above atmospheric, kPa (venting above it loses fluid).
    pub relief_gauge_kpa: f64,
    /// Tank pressure rating above atmospheric, kPa (the relief must open below it).
    pub design_gauge_kpa: f64,
    /// Vapour lost through seals and breathing per tank per year at a vapour pressure of 1 atm,
    /// kg/year (scales with the vapour pressure).
    pub seal_loss_kg_per_year: f64,
}

fn one() -> u32 {
    1
}

/// Rack template.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rack {
    /// Nodes per rack.
    pub nodes_per_rack: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Node power besides GPUs that scales with GPU power (CPU, memory, NIC, fans), fraction of GPU power.
    pub node_overhead_frac: f64,
    /// Constant node power, W per node.
    pub node_base_w: f64,
    /// Switches and management per rack, W.
    pub switch_w: f64,
    /// Fraction of rack heat that goes into the liquid (rest into room air).
    pub heat_to_liquid: f64,
    /// Seeded rack-to-rack flow imbalance, ±% (uniform).
    pub flow_imbalance_pct: f64,
    /// Manifold pick-up between CDU supply and rack inlet, K.
    pub manifold_pickup_k: f64,
}

/// CDU template.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Cdu {
    /// CDUs per hall.
    pub count: u32,
    /// Racks on each CDU's secondary loop.
    pub racks_per_cdu: u32,
    /// Rated heat-exchange capacity, kW.
    pub capacity_kw: f64,
    /// Design secondary flow per kW of design heat, L/min/kW.
    pub design_flow_lpm_per_kw: f64,
    /// Design heat load used to size flow and HX, kW.
    pub design_load_kw: f64,
    /// Local default supply setpoint (used at start and after BMS timeout), °C.
    pub supply_setpoint_c: f64,
    /// Lowest supply setpoint the firmware accepts, °C.
    pub supply_setpoint_min_c: f64,
    /// Highest supply setpoint the firmware accepts, °C.
    pub supply_setpoint_max_c: f64,
    /// Lowest flow setpoint, fraction of design flow.
    pub flow_min_frac: f64,
    /// Highest flow setpoint, fraction of design flow.
    pub flow_max_frac: f64,
    /// Duty pumps (N).
    pub duty_pumps: u32,
    /// Standby pumps (+1).
    pub standby_pumps: u32,
    /// Electric power of all duty pumps at design flow, kW.
    pub pump_design_power_kw: f64,
    /// Minimum pump speed, fraction.
    pub pump_min_speed: f64,
    /// Time for a standby pump to start after a trip, s.
    pub failover_delay_s: f64,
    /// HX approach (secondary supply − facility inlet) at design load and flows, K.
    pub hx_design_approach_k: f64,
    /// Secondary loop volume, m³.
    pub loop_volume_m3: f64,
    /// Supervisor heartbeat timeout before reverting to local defaults, s.
    pub bms_timeout_s: f64,
    /// Slow seeded fouling: UA lost per year, %.
    pub fouling_pct_per_year: f64,
    /// Supply-temperature PI: proportional gain, valve fraction per K.
    pub valve_kp_per_k: f64,
    /// Supply-temperature PI: integral time, s.
    pub valve_ti_s: f64,
}

/// Facility water system of one hall.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Facility {
    /// ASHRAE liquid-cooling class: W17, W27, W32, W40, W45 or W+.
    pub water_class: String,
    /// Local default facility supply setpoint, °C.
    pub supply_setpoint_c: f64,
    /// Lowest facility supply setpoint, °C.
    pub supply_setpoint_min_c: f64,
    /// Design temperature rise of the facility water across the CDUs, K.
    pub design_delta_t_k: f64,
    /// Facility pumps' electric power at design flow, kW.
    pub pump_design_power_kw: f64,
    /// Facility loop water volume, m³.
    pub loop_volume_m3: f64,
    /// Supervisor heartbeat timeout before reverting to the local default setpoint, s.
    pub bms_timeout_s: f64,
    /// Dry coolers (optional).
    #[serde(default)]
    pub dry_coolers: Option<DryCoolers>,
    /// Cooling tower (optional).
    #[serde(default)]
    pub tower: Option<Tower>,
    /// Trim chiller (optional).
    #[serde(default)]
    pub chiller: Option<Chiller>,
    /// Heat-reuse heat pump (optional).
    #[serde(default)]
    pub heat_reuse: Option<HeatReuse>,
    /// Facility pumps on a system curve, with ramp limits and transport delay (optional; without
    /// it the facility pumps follow `pump_design_power_kw` × (flow / design flow)³).
    #[serde(default)]
    pub hydraulics: Option<Hydraulics>,
}

/// Facility pumps and pipework: a system curve (static head + friction), a pump curve with a
/// best-efficiency point, a variable-speed drive with an acceleration limit, and the transport
/// delay of the supply main (docs/plant-physics.md §6).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Hydraulics {
    /// Head that does not fall with flow, m: the differential-pressure setpoint held across the
    /// farthest CDU branch (its heat exchanger and control valve) in a closed loop.
    pub static_head_m: f64,
    /// Friction head of mains, headers and heat-rejection coils at design flow, m (∝ flow²).
    pub friction_head_m: f64,
    /// Pump shut-off head at full speed, m (centrifugal pumps: 1.1–1.4 × the design head).
    pub shutoff_head_m: f64,
    /// Pump hydraulic efficiency at its best-efficiency point (design flow, full speed).
    pub bep_efficiency: f64,
    /// Motor × variable-speed-drive efficiency.
    pub motor_drive_efficiency: f64,
    /// Time the drive takes from standstill to full speed, s (acceleration limit; the same
    /// limit applies when slowing down).
    pub ramp_s: f64,
    /// Water volume of the supply main between the heat rejection and the CDUs, m³: the CDUs see
    /// the supply temperature of `volume / flow` seconds ago.
    pub supply_main_m3: f64,
}

/// Dry coolers of a hall, as one equivalent bank.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DryCoolers {
    /// Heat rejected at design, kW.
    pub design_capacity_kw: f64,
    /// Leaving water − entering air at design capacity and full fan speed, K.
    pub design_approach_k: f64,
    /// Entering air temperature at design, °C.
    pub design_air_c: f64,
    /// Air capacity rate / water capacity rate at full fan speed.
    pub air_to_water_capacity_ratio: f64,
    /// Fan power at full speed, kW.
    pub fan_power_kw: f64,
    /// Minimum fan speed when running, fraction.
    pub fan_min_speed: f64,
    /// Adiabatic pre-cooling pads (optional).
    #[serde(default)]
    pub adiabatic: Option<Adiabatic>,
}

/// Adiabatic pre-cooling of dry-cooler inlet air.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Adiabatic {
    /// Saturation effectiveness (0.7–0.85).
    pub effectiveness: f64,
    /// Water supplied per litre evaporated (≥ 1: bleed).
    pub water_per_evaporated: f64,
}

/// Open cooling tower (with a plate HX) of a hall.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tower {
    /// Heat rejected at design, kW.
    pub design_capacity_kw: f64,
    /// Leaving water − wet-bulb at design capacity and full fan, K.
    pub design_approach_k: f64,
    /// Design wet-bulb, °C.
    pub design_wet_bulb_c: f64,
    /// Fan power at full speed, kW.
    pub fan_power_kw: f64,
    /// Cycles of concentration (blowdown = evaporation / (cycles − 1)).
    pub cycles_of_concentration: f64,
}

/// Trim chiller.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Chiller {
    /// Cooling capacity, kW.
    pub capacity_kw: f64,
    /// `air-cooled` or `water-cooled` (condenser on dry-bulb or wet-bulb).
    pub condenser: String,
    /// Fraction of the Carnot COP achieved (η_c ≈ 0.5).
    pub carnot_efficiency: f64,
    /// Upper bound of the COP.
    pub cop_max: f64,
    /// Compressor stages (modules) of equal capacity; staged one at a time.
    #[serde(default = "one")]
    pub stages: u32,
    /// Minimum run time of a stage once started, s.
    #[serde(default = "default_chiller_min_run_s")]
    pub min_run_s: f64,
    /// Minimum off time of a stage before it may restart, s.
    #[serde(default = "default_chiller_min_off_s")]
    pub min_off_s: f64,
}

fn default_chiller_min_run_s() -> f64 {
    600.0
}

fn default_chiller_min_off_s() -> f64 {
    300.0
}

/// Heat-reuse heat pump lifting facility return water to district heating.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HeatReuse {
    /// Heat taken from facility water at full demand, kW.
    pub capacity_kw: f64,
    /// Delivery temperature, °C.
    pub delivery_c: f64,
    /// Fraction of the Carnot heating COP achieved.
    pub carnot_efficiency: f64,
    /// Outdoor dry-bulb above which district-heating demand falls to `summer_demand_frac`, °C.
    pub heating_limit_c: f64,
    /// Demand outside the heating season, fraction of capacity.
    pub summer_demand_frac: f64,
}

/// Air handlers (CRAH) removing the air-side heat into facility water.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AirHandling {
    /// Fan power per kW of air-side heat, kW/kW (used when `crah` is not given).
    #[serde(default)]
    pub fan_kw_per_kw: f64,
    /// Air handlers modelled from airflow, fan pressure and coils against a room-air limit
    /// (optional; replaces `fan_kw_per_kw`).
    #[serde(default)]
    pub crah: Option<Crah>,
}

/// Fan-wall air handlers with two coils in series: a warm coil on facility water (ε-NTU) and a
/// chilled-water coil served by an air-side chiller with integrated free cooling. The supply air
/// must stay at or below the room-air limit; what the coils cannot remove raises the room air
/// (scored). See docs/plant-physics.md §7.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Crah {
    /// Supply-air setpoint, °C.
    pub supply_air_c: f64,
    /// Room-air (server inlet) limit, °C (ASHRAE A1 recommended upper bound: 27 °C).
    pub room_air_max_c: f64,
    /// Air temperature rise across the servers, K (sets the airflow per kW).
    pub air_delta_t_k: f64,
    /// Fan total pressure at design airflow, Pa (coils, filters, distribution; ∝ airflow²).
    pub fan_pressure_pa: f64,
    /// Fan + motor + drive efficiency.
    pub fan_efficiency: f64,
    /// Warm coil: leaving air − entering facility water at design airflow, K.
    pub warm_coil_approach_k: f64,
    /// Chilled-water supply temperature of the air-side chiller, °C.
    pub chilled_water_c: f64,
    /// Chilled-water temperature rise across the coils, K.
    pub chilled_water_delta_t_k: f64,
    /// Air-side chiller capacity, kW.
    pub chiller_capacity_kw: f64,
    /// Air-side chiller: fraction of the Carnot COP achieved (package, condenser fans included).
    pub chiller_carnot_efficiency: f64,
    /// Air-side chiller: upper bound of the COP.
    pub chiller_cop_max: f64,
    /// Air-cooled condensing temperature above dry-bulb, K.
    pub condenser_approach_k: f64,
    /// Free-cooling coil: full free cooling when the dry-bulb is this far below the chilled-water
    /// supply, none when it is this far below the chilled-water return, K.
    pub free_cooling_approach_k: f64,
    /// Free-cooling fan power per kW of heat removed by free cooling, kW/kW.
    pub free_cooling_fan_kw_per_kw: f64,
}

impl Cdu {
    /// Design secondary flow, L/min (design flow per kW × design load).
    pub fn design_flow_lpm(&self) -> f64 {
        self.design_flow_lpm_per_kw * self.design_load_kw
    }

    /// Lowest and highest flow setpoint the firmware accepts, L/min.
    pub fn flow_setpoint_range_lpm(&self) -> (f64, f64) {
        let d = self.design_flow_lpm();
        (d * self.flow_min_frac, d * self.flow_max_frac)
    }
}

impl Facility {
    /// Highest facility supply setpoint: the maximum of the site's ASHRAE water class, °C.
    pub fn supply_setpoint_max_c(&self) -> f64 {
        water_class_max_c(&self.water_class).unwrap_or(self.supply_setpoint_c)
    }
}

/// Built-in site TOML texts (the same files ship under `sites/`).
pub fn builtin_site_toml(name: &str) -> Option<&'static str> {
    match name {
        "hall-10k" => Some(include_str!("../../sites/hall-10k.toml")),
        "supernode-640" => Some(include_str!("../../sites/supernode-640.toml")),
        "campus-100k" => Some(include_str!("../../sites/campus-100k.toml")),
        "supernode-2pic" => Some(include_str!("../../sites/supernode-2pic.toml")),
        _ => None,
    }
}

/// A built-in reference site, parsed and validated.
pub fn builtin_site(name: &str) -> Result<Site, SiteError> {
    let text = builtin_site_toml(name).ok_or_else(|| SiteError::UnknownBuiltin(name.to_string()))?;
    Site::from_toml_str(name, text)
}

const WATER_CLASSES: [(&str, f64); 6] = [
    ("W17", 17.0),
    ("W27", 27.0),
    ("W32", 32.0),
    ("W40", 40.0),
    ("W45", 45.0),
    ("W+", 60.0),
];

/// Maximum facility supply temperature of an ASHRAE liquid class, °C.
pub fn water_class_max_c(class: &str) -> Option<f64> {
    WATER_CLASSES.iter().find(|(c, _)| *c == class).map(|(_, t)| *t)
}

struct Check {
    errors: Vec<SiteError>,
}

impl Check {
    fn range(&mut self, field: &str, v: f64, lo: f64, hi: f64, what: &str) {
        if !(v.is_finite() && v >= lo && v <= hi) {
            self.errors.push(SiteError::Invalid {
                field: field.to_string(),
                value: format!("{v}"),
                reason: format!("must be within [{lo}, {hi}] ({what})"),
            });
        }
    }
    fn positive(&mut self, field: &str, v: f64) {
        if !(v.is_finite() && v > 0.0) {
            self.errors.push(SiteError::Invalid {
                field: field.to_string(),
                value: format!("{v}"),
                reason: "must be a positive finite number".into(),
            });
        }
    }
    fn rule(&mut self, ok: bool, field: &str, value: String, reason: &str) {
        if !ok {
            self.errors.push(SiteError::Invalid {
                field: field.to_string(),
                value,
                reason: reason.to_string(),
            });
        }
    }
}

impl Site {
    /// Parse and validate a site file. `source_name` is used in error messages.
    pub fn from_toml_str(source_name: &str, text: &str) -> Result<Site, SiteError> {
        let site: Site = toml::from_str(text).map_err(|e| SiteError::Parse {
            source_name: source_name.to_string(),
            message: e.to_string(),
        })?;
        site.validate()?;
        Ok(site)
    }

    /// Check every field against the physics; the first error (in file order) is returned.
    pub fn validate(&self) -> Result<(), SiteError> {
        let mut c = Check { errors: Vec::new() };
        let s = &self.site;
        c.rule(
            !s.name.is_empty()
                && s.name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_'),
            "site.name",
            format!("{:?}", s.name),
            "must be non-empty ASCII letters, digits, '-' or '_' (it is used in MQTT topics)",
        );
        c.positive("site.power_budget_kw", s.power_budget_kw);
        c.range("site.misc_load_kw", s.misc_load_kw, 0.0, 1e6, "kW");

        let g = &self.gpu;
        c.positive("gpu.tdp_w", g.tdp_w);
        c.range("gpu.idle_w", g.idle_w, 0.0, g.tdp_w * 0.9, "W, below 90 % of TDP");
        c.range(
            "gpu.min_cap_w",
            g.min_cap_w,
            g.idle_w,
            g.tdp_w,
            "W, between idle and TDP",
        );
        c.range("gpu.leakage_per_k", g.leakage_per_k, 0.0, 0.05, "1/K");
        c.range("gpu.perf_alpha", g.perf_alpha, 0.0, 3.0, "exponent");
        if let Some(k) = g.leakage_exp_per_k {
            c.range("gpu.leakage_exp_per_k", k, 0.0, 0.1, "1/K");
        }
        if let Some(l) = g.leakage_w_at_60c {
            c.range("gpu.leakage_w_at_60c", l, 0.0, g.idle_w, "W, part of idle_w");
        }
        if let Some([s1, knee, s2]) = g.perf_knee {
            c.range("gpu.perf_knee[0]", s1, 0.0, 1.0, "shallow slope");
            c.range("gpu.perf_knee[1]", knee, 0.05, 1.0, "knee power ratio");
            c.range("gpu.perf_knee[2]", s2, 0.0, 10.0, "deep slope");
        }
        c.range("gpu.slowdown_c", g.slowdown_c, 40.0, 120.0, "°C");
        c.rule(
            g.max_operating_c <= g.slowdown_c && g.slowdown_c < g.shutdown_c,
            "gpu.slowdown_c",
            format!("{}", g.slowdown_c),
            "must satisfy max_operating_c ≤ slowdown_c < shutdown_c",
        );
        c.range("gpu.slowdown_hysteresis_k", g.slowdown_hysteresis_k, 0.0, 20.0, "K");
        c.range("gpu.tau_s", g.tau_s, 0.1, 600.0, "s");

        let p = &self.cold_plate;
        c.range("cold_plate.r_cond_k_per_w", p.r_cond_k_per_w, 1e-4, 1.0, "K/W");
        c.range("cold_plate.r_cond_spread_pct", p.r_cond_spread_pct, 0.0, 30.0, "%");
        c.range("cold_plate.r_conv_ref_k_per_w", p.r_conv_ref_k_per_w, 0.0, 1.0, "K/W");
        c.positive("cold_plate.ref_flow_lpm", p.ref_flow_lpm);
        c.range(
            "cold_plate.conv_exponent",
            p.conv_exponent,
            0.0,
            1.0,
            "Dittus–Boelter 0.8",
        );

        let e = &self.electrical;
        c.positive("electrical.transformer_rating_kva", e.transformer_rating_kva);
        c.range(
            "electrical.transformer_no_load_loss_pct",
            e.transformer_no_load_loss_pct,
            0.0,
            5.0,
            "%",
        );
        c.range(
            "electrical.transformer_load_loss_pct",
            e.transformer_load_loss_pct,
            0.0,
            5.0,
            "%",
        );
        c.positive("electrical.ups_rating_kw", e.ups_rating_kw);
        c.range("electrical.pdu_efficiency", e.pdu_efficiency, 0.8, 1.0, "0–1");
        if let Some(rc) = &e.room_cooling {
            c.range(
                "electrical.room_cooling.fan_kw_per_kw",
                rc.fan_kw_per_kw,
                0.0,
                0.5,
                "kW of fan per kW of heat",
            );
            c.rule(
                self.halls.first().is_some_and(|h| h.air.crah.is_some()),
                "electrical.room_cooling",
                "present".into(),
                "needs an air-side chiller plant in the first hall ([halls.air.crah]) for its chilled water",
            );
        }
        c.rule(
            !e.ups_efficiency_curve.is_empty(),
            "electrical.ups_efficiency_curve",
            "[]".into(),
            "needs at least one [load fraction, efficiency] pair",
        );
        let mut last = -1.0;
        for (i, [x, eff]) in e.ups_efficiency_curve.iter().enumerate() {
            let f = format!("electrical.ups_efficiency_curve[{i}]");
            c.rule(
                *x > last && *x <= 1.5,
                &f,
                format!("[{x}, {eff}]"),
                "load fractions must ascend within (0, 1.5]",
            );
            c.rule(
                *eff > 0.5 && *eff <= 1.0,
                &f,
                format!("[{x}, {eff}]"),
                "efficiency must be within (0.5, 1]",
            );
            last = *x;
        }

        let ss = &self.sensors;
        c.range("sensors.temp_noise_k", ss.temp_noise_k, 0.0, 5.0, "K");
        c.range("sensors.temp_bias_k", ss.temp_bias_k, 0.0, 5.0, "K");
        c.range("sensors.flow_noise_pct", ss.flow_noise_pct, 0.0, 20.0, "%");
        c.range("sensors.power_noise_pct", ss.power_noise_pct, 0.0, 20.0, "%");
        c.range("sensors.delay_s", ss.delay_s, 0.0, 300.0, "s");
        c.range("sensors.gpu_temp_bias_k", ss.gpu_temp_bias_k, 0.0, 5.0, "K");

        c.rule(
            !self.halls.is_empty(),
            "halls",
            "[]".into(),
            "a site needs at least one hall",
        );
        // Size: the plant keeps state per accelerator; a site beyond this is a typo, not a plan.
        let total: f64 = self
            .halls
            .iter()
            .map(|h| {
                f64::from(h.count)
                    * f64::from(h.cdu.count)
                    * f64::from(h.cdu.racks_per_cdu)
                    * f64::from(h.rack.nodes_per_rack)
                    * f64::from(h.rack.gpus_per_node)
            })
            .sum();
        c.rule(
            total <= MAX_SITE_GPUS as f64,
            "halls",
            format!("{total:.0} GPUs"),
            &format!("a site may hold at most {MAX_SITE_GPUS} accelerators (count × cdu.count × racks_per_cdu × nodes_per_rack × gpus_per_node)"),
        );
        for (h, hall) in self.halls.iter().enumerate() {
            let f = |name: &str| format!("halls[{h}].{name}");
            c.range(&f("count"), hall.count as f64, 1.0, 64.0, "identical halls");
            let r = &hall.rack;
            c.range(&f("rack.nodes_per_rack"), r.nodes_per_rack as f64, 1.0, 256.0, "nodes");
            c.range(&f("rack.gpus_per_node"), r.gpus_per_node as f64, 1.0, 1024.0, "GPUs");
            c.range(
                &f("rack.node_overhead_frac"),
                r.node_overhead_frac,
                0.0,
                2.0,
                "fraction",
            );
            c.range(&f("rack.node_base_w"), r.node_base_w, 0.0, 1e5, "W");
            c.range(&f("rack.switch_w"), r.switch_w, 0.0, 1e5, "W");
            c.range(&f("rack.heat_to_liquid"), r.heat_to_liquid, 0.5, 1.0, "fraction");
            c.range(&f("rack.flow_imbalance_pct"), r.flow_imbalance_pct, 0.0, 30.0, "%");
            c.range(&f("rack.manifold_pickup_k"), r.manifold_pickup_k, 0.0, 3.0, "K");
            let d = &hall.cdu;
            c.range(&f("cdu.count"), d.count as f64, 1.0, 1000.0, "CDUs");
            c.range(&f("cdu.racks_per_cdu"), d.racks_per_cdu as f64, 1.0, 200.0, "racks");
            c.positive(&f("cdu.capacity_kw"), d.capacity_kw);
            c.range(
                &f("cdu.design_flow_lpm_per_kw"),
                d.design_flow_lpm_per_kw,
                0.5,
                5.0,
                "L/min/kW",
            );
            c.range(
                &f("cdu.design_load_kw"),
                d.design_load_kw,
                1.0,
                d.capacity_kw,
                "kW, at most the capacity",
            );
            c.range(
                &f("cdu.supply_setpoint_min_c"),
                d.supply_setpoint_min_c,
                5.0,
                60.0,
                "°C",
            );
            c.range(
                &f("cdu.supply_setpoint_max_c"),
                d.supply_setpoint_max_c,
                d.supply_setpoint_min_c,
                65.0,
                "°C",
            );
            c.range(
                &f("cdu.supply_setpoint_c"),
                d.supply_setpoint_c,
                d.supply_setpoint_min_c,
                d.supply_setpoint_max_c,
                "°C, within the setpoint limits",
            );
            c.range(
                &f("cdu.flow_min_frac"),
                d.flow_min_frac,
                0.1,
                1.0,
                "fraction of design flow",
            );
            c.range(
                &f("cdu.flow_max_frac"),
                d.flow_max_frac,
                d.flow_min_frac,
                1.5,
                "fraction of design flow",
            );
            c.range(&f("cdu.duty_pumps"), d.duty_pumps as f64, 1.0, 16.0, "pumps");
            c.range(&f("cdu.standby_pumps"), d.standby_pumps as f64, 0.0, 16.0, "pumps");
            c.positive(&f("cdu.pump_design_power_kw"), d.pump_design_power_kw);
            c.range(&f("cdu.pump_min_speed"), d.pump_min_speed, 0.05, 1.0, "fraction");
            c.range(&f("cdu.failover_delay_s"), d.failover_delay_s, 0.0, 600.0, "s");
            c.range(&f("cdu.hx_design_approach_k"), d.hx_design_approach_k, 0.5, 20.0, "K");
            c.range(&f("cdu.loop_volume_m3"), d.loop_volume_m3, 0.01, 100.0, "m³");
            c.range(&f("cdu.bms_timeout_s"), d.bms_timeout_s, 1.0, 86400.0, "s");
            c.range(
                &f("cdu.fouling_pct_per_year"),
                d.fouling_pct_per_year,
                0.0,
                50.0,
                "%/year",
            );
            c.range(&f("cdu.valve_kp_per_k"), d.valve_kp_per_k, 0.0, 10.0, "1/K");
            c.range(&f("cdu.valve_ti_s"), d.valve_ti_s, 1.0, 10_000.0, "s");
            let rack_design_kw = rack_design_power_w(self, hall) / 1000.0;
            let cdu_it_kw = rack_design_kw * d.racks_per_cdu as f64 * r.heat_to_liquid;
            c.rule(
                cdu_it_kw <= d.capacity_kw,
                &f("cdu.capacity_kw"),
                format!("{}", d.capacity_kw),
                &format!("is below the liquid heat of its racks at full power ({cdu_it_kw:.0} kW)"),
            );

            let fw = &hall.facility;
            let class_max = water_class_max_c(&fw.water_class);
            c.rule(
                class_max.is_some(),
                &f("facility.water_class"),
                format!("{:?}", fw.water_class),
                "must be one of W17, W27, W32, W40, W45, W+",
            );
            if let Some(max) = class_max {
                c.range(
                    &f("facility.supply_setpoint_c"),
                    fw.supply_setpoint_c,
                    fw.supply_setpoint_min_c,
                    max,
                    "°C, at most the water class maximum",
                );
            }
            c.range(
                &f("facility.supply_setpoint_min_c"),
                fw.supply_setpoint_min_c,
                2.0,
                60.0,
                "°C",
            );
            c.range(&f("facility.design_delta_t_k"), fw.design_delta_t_k, 2.0, 30.0, "K");
            c.positive(&f("facility.pump_design_power_kw"), fw.pump_design_power_kw);
            c.range(&f("facility.loop_volume_m3"), fw.loop_volume_m3, 0.1, 10_000.0, "m³");
            c.range(&f("facility.bms_timeout_s"), fw.bms_timeout_s, 1.0, 86400.0, "s");
            c.rule(
                fw.dry_coolers.is_some() || fw.tower.is_some(),
                &f("facility"),
                "no heat rejection".into(),
                "needs [dry_coolers] or [tower]",
            );
            c.rule(
                !(fw.dry_coolers.is_some() && fw.tower.is_some()),
                &f("facility"),
                "dry_coolers and tower".into(),
                "describe one primary heat rejection: either [dry_coolers] or [tower]",
            );
            if let Some(dc) = &fw.dry_coolers {
                c.positive(&f("facility.dry_coolers.design_capacity_kw"), dc.design_capacity_kw);
                c.range(
                    &f("facility.dry_coolers.design_approach_k"),
                    dc.design_approach_k,
                    1.0,
                    20.0,
                    "K",
                );
                c.range(
                    &f("facility.dry_coolers.design_air_c"),
                    dc.design_air_c,
                    -30.0,
                    55.0,
                    "°C",
                );
                c.range(
                    &f("facility.dry_coolers.air_to_water_capacity_ratio"),
                    dc.air_to_water_capacity_ratio,
                    1.05,
                    10.0,
                    "ratio > 1",
                );
                c.positive(&f("facility.dry_coolers.fan_power_kw"), dc.fan_power_kw);
                c.range(
                    &f("facility.dry_coolers.fan_min_speed"),
                    dc.fan_min_speed,
                    0.0,
                    1.0,
                    "fraction",
                );
                if let Some(a) = &dc.adiabatic {
                    c.range(
                        &f("facility.dry_coolers.adiabatic.effectiveness"),
                        a.effectiveness,
                        0.3,
                        0.95,
                        "fraction",
                    );
                    c.range(
                        &f("facility.dry_coolers.adiabatic.water_per_evaporated"),
                        a.water_per_evaporated,
                        1.0,
                        5.0,
                        "ratio ≥ 1",
                    );
                }
                let cap_needed = hall_design_heat_kw(self, hall);
                c.rule(
                    dc.design_capacity_kw >= 0.8 * cap_needed,
                    &f("facility.dry_coolers.design_capacity_kw"),
                    format!("{}", dc.design_capacity_kw),
                    &format!("is far below the hall's design heat ({cap_needed:.0} kW)"),
                );
            }
            if let Some(t) = &fw.tower {
                c.positive(&f("facility.tower.design_capacity_kw"), t.design_capacity_kw);
                c.range(
                    &f("facility.tower.design_approach_k"),
                    t.design_approach_k,
                    1.0,
                    15.0,
                    "K",
                );
                c.range(
                    &f("facility.tower.design_wet_bulb_c"),
                    t.design_wet_bulb_c,
                    -10.0,
                    35.0,
                    "°C",
                );
                c.positive(&f("facility.tower.fan_power_kw"), t.fan_power_kw);
                c.range(
                    &f("facility.tower.cycles_of_concentration"),
                    t.cycles_of_concentration,
                    1.5,
                    20.0,
                    "cycles",
                );
            }
            if let Some(ch) = &fw.chiller {
                c.positive(&f("facility.chiller.capacity_kw"), ch.capacity_kw);
                c.rule(
                    ch.condenser == "air-cooled" || ch.condenser == "water-cooled",
                    &f("facility.chiller.condenser"),
                    format!("{:?}", ch.condenser),
                    "must be \"air-cooled\" or \"water-cooled\"",
                );
                c.range(
                    &f("facility.chiller.carnot_efficiency"),
                    ch.carnot_efficiency,
                    0.1,
                    0.9,
                    "fraction",
                );
                c.range(&f("facility.chiller.cop_max"), ch.cop_max, 1.0, 30.0, "COP");
            }
            if let Some(hr) = &fw.heat_reuse {
                c.positive(&f("facility.heat_reuse.capacity_kw"), hr.capacity_kw);
                c.range(&f("facility.heat_reuse.delivery_c"), hr.delivery_c, 30.0, 120.0, "°C");
                c.range(
                    &f("facility.heat_reuse.carnot_efficiency"),
                    hr.carnot_efficiency,
                    0.1,
                    0.9,
                    "fraction",
                );
                c.range(
                    &f("facility.heat_reuse.summer_demand_frac"),
                    hr.summer_demand_frac,
                    0.0,
                    1.0,
                    "fraction",
                );
            }
            c.range(&f("air.fan_kw_per_kw"), hall.air.fan_kw_per_kw, 0.0, 0.5, "kW/kW");
            if let Some(ch) = &fw.chiller {
                c.range(&f("facility.chiller.stages"), ch.stages as f64, 1.0, 32.0, "stages");
                c.range(&f("facility.chiller.min_run_s"), ch.min_run_s, 0.0, 7200.0, "s");
                c.range(&f("facility.chiller.min_off_s"), ch.min_off_s, 0.0, 7200.0, "s");
            }
            if let Some(hy) = &fw.hydraulics {
                let g = |n: &str| f(&format!("facility.hydraulics.{n}"));
                c.range(&g("static_head_m"), hy.static_head_m, 0.0, 200.0, "m");
                c.range(&g("friction_head_m"), hy.friction_head_m, 0.1, 200.0, "m");
                c.rule(
                    hy.shutoff_head_m.is_finite() && hy.shutoff_head_m > hy.static_head_m + hy.friction_head_m,
                    &g("shutoff_head_m"),
                    format!("{}", hy.shutoff_head_m),
                    "must exceed the design head (static_head_m + friction_head_m): the pump could not deliver design flow",
                );
                c.range(&g("bep_efficiency"), hy.bep_efficiency, 0.3, 0.95, "fraction");
                c.range(
                    &g("motor_drive_efficiency"),
                    hy.motor_drive_efficiency,
                    0.5,
                    1.0,
                    "fraction",
                );
                c.range(&g("ramp_s"), hy.ramp_s, 0.0, 600.0, "s");
                c.range(
                    &g("supply_main_m3"),
                    hy.supply_main_m3,
                    0.0,
                    fw.loop_volume_m3,
                    "m³, part of loop_volume_m3",
                );
            }
            if let Some(cr) = &hall.air.crah {
                let g = |n: &str| f(&format!("air.crah.{n}"));
                c.range(&g("supply_air_c"), cr.supply_air_c, 10.0, 35.0, "°C");
                c.range(
                    &g("room_air_max_c"),
                    cr.room_air_max_c,
                    cr.supply_air_c,
                    45.0,
                    "°C, at least supply_air_c",
                );
                c.range(&g("air_delta_t_k"), cr.air_delta_t_k, 3.0, 30.0, "K");
                c.range(&g("fan_pressure_pa"), cr.fan_pressure_pa, 50.0, 3000.0, "Pa");
                c.range(&g("fan_efficiency"), cr.fan_efficiency, 0.2, 0.9, "fraction");
                c.range(&g("warm_coil_approach_k"), cr.warm_coil_approach_k, 0.5, 20.0, "K");
                c.range(
                    &g("chilled_water_c"),
                    cr.chilled_water_c,
                    4.0,
                    cr.supply_air_c - 1.0,
                    "°C, below the supply air",
                );
                c.range(
                    &g("chilled_water_delta_t_k"),
                    cr.chilled_water_delta_t_k,
                    2.0,
                    15.0,
                    "K",
                );
                c.range(&g("chiller_capacity_kw"), cr.chiller_capacity_kw, 0.0, 1e6, "kW");
                c.range(
                    &g("chiller_carnot_efficiency"),
                    cr.chiller_carnot_efficiency,
                    0.1,
                    0.9,
                    "fraction",
                );
                c.range(&g("chiller_cop_max"), cr.chiller_cop_max, 1.0, 30.0, "COP");
                c.range(&g("condenser_approach_k"), cr.condenser_approach_k, 2.0, 30.0, "K");
                c.range(
                    &g("free_cooling_approach_k"),
                    cr.free_cooling_approach_k,
                    0.5,
                    20.0,
                    "K",
                );
                c.range(
                    &g("free_cooling_fan_kw_per_kw"),
                    cr.free_cooling_fan_kw_per_kw,
                    0.0,
                    0.2,
                    "kW/kW",
                );
            }
            if let Some(im) = &hall.immersion {
                check_immersion(&mut c, self, hall, im, &f);
            }
        }
        match c.errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Total GPUs on the site.
    pub fn gpu_count(&self) -> usize {
        self.halls
            .iter()
            .map(|h| {
                h.count as usize
                    * h.cdu.count as usize
                    * h.cdu.racks_per_cdu as usize
                    * (h.rack.nodes_per_rack * h.rack.gpus_per_node) as usize
            })
            .sum()
    }

    /// Total racks on the site.
    pub fn rack_count(&self) -> usize {
        self.halls
            .iter()
            .map(|h| h.count as usize * h.cdu.count as usize * h.cdu.racks_per_cdu as usize)
            .sum()
    }

    /// Total CDUs on the site.
    pub fn cdu_count(&self) -> usize {
        self.halls.iter().map(|h| h.count as usize * h.cdu.count as usize).sum()
    }

    /// Total halls on the site (after expanding `count`).
    pub fn hall_count(&self) -> usize {
        self.halls.iter().map(|h| h.count as usize).sum()
    }

    /// IT power of the whole site with every GPU at TDP, kW.
    pub fn design_it_kw(&self) -> f64 {
        self.halls
            .iter()
            .map(|h| {
                h.count as f64 * h.cdu.count as f64 * h.cdu.racks_per_cdu as f64 * rack_design_power_w(self, h) / 1000.0
            })
            .sum()
    }
}

fn check_immersion(c: &mut Check, site: &Site, hall: &Hall, im: &Immersion, f: &dyn Fn(&str) -> String) {
    let fluid = crate::dielectric::fluid_by_name(&im.fluid);
    c.rule(
        fluid.is_some(),
        &f("immersion.fluid"),
        format!("{:?}", im.fluid),
        "must be one of novec-649, hfe-7100, hfe-7000",
    );
    c.rule(
        hall.cdu.racks_per_cdu == 1,
        &f("cdu.racks_per_cdu"),
        format!("{}", hall.cdu.racks_per_cdu),
        "must be 1 in an immersion hall (each tank has its own condenser-water skid)",
    );
    c.rule(
        hall.rack.heat_to_liquid == 1.0,
        &f("rack.heat_to_liquid"),
        format!("{}", hall.rack.heat_to_liquid),
        "must be 1.0 in an immersion hall (everything in the tank boils the fluid)",
    );
    c.range(
        &f("immersion.fluid_mass_kg"),
        im.fluid_mass_kg,
        10.0,
        1e5,
        "kg per tank",
    );
    c.range(
        &f("immersion.min_fluid_mass_kg"),
        im.min_fluid_mass_kg,
        0.0,
        im.fluid_mass_kg,
        "kg, at most the charge",
    );
    c.range(
        &f("immersion.hardware_heat_capacity_kj_per_k"),
        im.hardware_heat_capacity_kj_per_k,
        0.0,
        1e5,
        "kJ/K",
    );
    c.range(
        &f("immersion.boiling_area_cm2"),
        im.boiling_area_cm2,
        0.1,
        1000.0,
        "cm²",
    );
    c.range(&f("immersion.superheat_ref_k"), im.superheat_ref_k, 0.1, 50.0, "K");
    c.range(
        &f("immersion.superheat_ref_w_per_cm2"),
        im.superheat_ref_w_per_cm2,
        0.1,
        100.0,
        "W/cm²",
    );
    c.range(
        &f("immersion.boiling_exponent"),
        im.boiling_exponent,
        1.0,
        5.0,
        "q ∝ ΔT^n",
    );
    c.range(&f("immersion.chf_enhancement"), im.chf_enhancement, 0.5, 4.0, "ratio");
    c.range(
        &f("immersion.film_boiling_w_per_m2_k"),
        im.film_boiling_w_per_m2_k,
        10.0,
        5000.0,
        "W/(m²·K)",
    );
    c.range(
        &f("immersion.package_r_k_per_w"),
        im.package_r_k_per_w,
        1e-4,
        5.0,
        "K/W",
    );
    c.range(
        &f("immersion.package_r_spread_pct"),
        im.package_r_spread_pct,
        0.0,
        30.0,
        "%",
    );
    c.positive(&f("immersion.condenser_ua_kw_per_k"), im.condenser_ua_kw_per_k);
    c.range(
        &f("immersion.condenser_water_side_frac"),
        im.condenser_water_side_frac,
        0.0,
        0.95,
        "fraction",
    );
    c.range(
        &f("immersion.design_gauge_kpa"),
        im.design_gauge_kpa,
        1.0,
        500.0,
        "kPa above atmospheric",
    );
    c.range(
        &f("immersion.relief_gauge_kpa"),
        im.relief_gauge_kpa,
        0.5,
        im.design_gauge_kpa,
        "kPa above atmospheric, at most the tank rating",
    );
    c.range(
        &f("immersion.seal_loss_kg_per_year"),
        im.seal_loss_kg_per_year,
        0.0,
        1e4,
        "kg/year per tank",
    );
    if let Some(fl) = fluid {
        // The surfaces must be able to boil the design power below their critical heat flux.
        let q = site.gpu.tdp_w / im.boiling_area_cm2;
        let chf = fl.chf_zuber_w_m2(crate::dielectric::P_ATM_PA) / 1e4 * im.chf_enhancement;
        c.rule(
            q < chf,
            &f("immersion.boiling_area_cm2"),
            format!("{}", im.boiling_area_cm2),
            &format!(
                "gives {q:.1} W/cm² at TDP, at or above the critical heat flux of {chf:.1} W/cm² (dry-out at full power)"
            ),
        );
    }
}

/// Rack power with every GPU at TDP, W.
pub fn rack_design_power_w(site: &Site, hall: &Hall) -> f64 {
    let r = &hall.rack;
    let gpus = (r.nodes_per_rack * r.gpus_per_node) as f64;
    gpus * site.gpu.tdp_w * (1.0 + r.node_overhead_frac) + r.nodes_per_rack as f64 * r.node_base_w + r.switch_w
}

/// Heat into one hall's facility water with every GPU at TDP (liquid and air side), kW.
pub fn hall_design_heat_kw(site: &Site, hall: &Hall) -> f64 {
    hall.cdu.count as f64 * hall.cdu.racks_per_cdu as f64 * rack_design_power_w(site, hall) / 1000.0
        * (1.0 + hall.air.fan_kw_per_kw * (1.0 - hall.rack.heat_to_liquid))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The leakage trade-off the policy rests on: a warmer die below its power limit draws more
    /// power at the same speed; at its limit it draws the limit and runs slower; on the knee
    /// curve fitted for hall-10k's GPU the numbers are the plant's, which the coordinated policy reasons with (150 W idle, 100 W of it leakage
    /// at 60 °C, κ = 0.015/K, knee [0.17, 0.78, 1.92]).
    #[test]
    fn a_warmer_die_costs_power_below_the_limit_and_speed_at_it() {
        let site = builtin_site("hall-10k").unwrap();
        let g = &site.gpu;
        // Below the limit: half utilisation.
        let (p60, s60) = g.power_and_speed(60.0, 0.5, 1000.0);
        let (p70, s70) = g.power_and_speed(70.0, 0.5, 1000.0);
        assert!((p60 - (150.0 + 0.5 * 850.0)).abs() < 1e-9, "{p60}");
        assert!((p70 - p60 - 100.0 * ((0.15f64).exp() - 1.0)).abs() < 1e-9, "{p70}");
        assert_eq!((s60, s70), (1.0, 1.0));
        // At the limit: full utilisation demands more than 1,000 W.
        let (q60, v60) = g.power_and_speed(60.0, 1.0, 1000.0);
        let (q80, v80) = g.power_and_speed(80.0, 1.0, 1000.0);
        assert_eq!((q60, q80), (1000.0, 1000.0));
        assert_eq!(v60, 1.0, "150 + 850 = 1,000 W: not capped at 60 °C");
        let demand = 50.0 + 100.0 * (0.3f64).exp() + 850.0;
        assert!((v80 - (1.0 - 0.17 * (1.0 - 1000.0 / demand))).abs() < 1e-12, "{v80}");
        assert!(v80 < 1.0);
        // Deep caps take the steeper slope.
        let (_, deep) = g.power_and_speed(60.0, 1.0, 500.0);
        assert!((deep - (1.0 - 0.17 * 0.22 - 1.92 * 0.28)).abs() < 1e-12, "{deep}");
    }

    #[test]
    fn builtin_sites_parse_and_have_the_documented_sizes() {
        let h = builtin_site("hall-10k").unwrap();
        assert_eq!(h.gpu_count(), 10_368);
        assert_eq!(h.rack_count(), 144);
        assert_eq!(h.cdu_count(), 12);
        let s = builtin_site("supernode-640").unwrap();
        assert_eq!(s.gpu_count(), 10_240);
        assert_eq!(s.rack_count(), 16);
        let t = builtin_site("supernode-2pic").unwrap();
        assert_eq!(t.gpu_count(), 10_240);
        assert_eq!(t.rack_count(), 16);
        assert!(t.halls[0].immersion.is_some());
        let c = builtin_site("campus-100k").unwrap();
        assert!(c.gpu_count() >= 100_000, "{}", c.gpu_count());
        assert!(c.hall_count() > 1);
    }

    #[test]
    fn unknown_builtin_names_the_choices() {
        let e = builtin_site("hall-1").unwrap_err().to_string();
        assert!(e.contains("hall-1") && e.contains("hall-10k"), "{e}");
    }

    #[test]
    fn invalid_field_is_named_with_its_value() {
        let text = builtin_site_toml("hall-10k")
            .unwrap()
            .replace("capacity_kw = 1800.0", "capacity_kw = -5.0");
        let e = Site::from_toml_str("x.toml", &text).unwrap_err().to_string();
        assert!(e.contains("halls[0].cdu.capacity_kw") && e.contains("-5"), "{e}");
    }

    #[test]
    fn electrical_room_cooling_is_checked() {
        let base = builtin_site_toml("hall-10k").unwrap();
        let text = base.replace("fan_kw_per_kw = 0.04", "fan_kw_per_kw = nan");
        let e = Site::from_toml_str("x.toml", &text).unwrap_err().to_string();
        assert!(
            e.contains("electrical.room_cooling.fan_kw_per_kw") && e.contains("NaN"),
            "{e}"
        );
        // Its chilled water comes from the air-side chiller plant: without one it is refused.
        let mut site = Site::from_toml_str("x.toml", base).unwrap();
        site.halls[0].air.crah = None;
        let e = site.validate().unwrap_err().to_string();
        assert!(e.contains("electrical.room_cooling") && e.contains("crah"), "{e}");
    }

    #[test]
    fn unknown_field_and_syntax_errors_name_the_place() {
        let text = builtin_site_toml("hall-10k")
            .unwrap()
            .replace("tdp_w = 1000.0", "tdp_watts = 1000.0");
        let e = Site::from_toml_str("x.toml", &text).unwrap_err().to_string();
        assert!(e.contains("tdp_watts"), "{e}");
        let e = Site::from_toml_str("y.toml", "[site\nname=1").unwrap_err().to_string();
        assert!(e.contains("y.toml") && e.contains("line"), "{e}");
    }

    #[test]
    fn absurd_sizes_are_refused_naming_the_field() {
        let text = builtin_site_toml("hall-10k")
            .unwrap()
            .replace("count = 12\nracks_per_cdu = 12", "count = 1000\nracks_per_cdu = 200")
            .replace(
                "nodes_per_rack = 18\ngpus_per_node = 4",
                "nodes_per_rack = 256\ngpus_per_node = 1024",
            );
        let e = Site::from_toml_str("x.toml", &text).unwrap_err().to_string();
        assert!(
            e.contains("`halls`") && e.contains("GPUs") && e.contains("1000000"),
            "{e}"
        );
    }

    #[test]
    fn water_class_is_checked() {
        let text = builtin_site_toml("hall-10k")
            .unwrap()
            .replace("water_class = \"W40\"", "water_class = \"W41\"");
        let e = Site::from_toml_str("x.toml", &text).unwrap_err().to_string();
        assert!(e.contains("water_class") && e.contains("W41"), "{e}");
    }
}
