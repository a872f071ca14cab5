//! The plant's interface: what goes to the equipment ([`Actions`]) and what comes back from its
//! sensors ([`Measurements`]).
//!
//! These types are the seam between the plant (simulated or real) and the control side. The
//! simulated plant fills [`Measurements`] the way real sensors would report them (noise, bias,
//! quantisation, delay, quality); the adapters will fill the same types from Modbus registers and
//! MQTT telemetry. Neither side depends on the other: both depend on this module.
//!
//! Per-GPU telemetry is kept as flat arrays over all GPUs of the site (structure of arrays); rack
//! `r` owns GPUs `r * gpus_per_rack .. (r + 1) * gpus_per_rack` of its hall layout, as given by
//! [`crate::topology::Topology`].

use serde::{Deserialize, Serialize};

/// How far a reading can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Quality {
    /// Fresh and plausible.
    #[default]
    Good,
    /// Delivered but suspicious (sentinel, out of range, known faulty sensor).
    Uncertain,
    /// No value could be obtained this time (timeout, exception, dropout); `value` is the last
    /// good one and `t_s` says how old it is.
    Bad,
}

/// One measured value with its sampling time (seconds of plant time) and quality.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Reading {
    /// The value, in the unit its field name states.
    pub value: f64,
    /// Plant time at which it was sampled, s.
    pub t_s: f64,
    /// Trust in the value.
    pub quality: Quality,
}

impl Reading {
    /// A good reading.
    pub fn good(value: f64, t_s: f64) -> Self {
        Self {
            value,
            t_s,
            quality: Quality::Good,
        }
    }
    /// Age of the reading at time `now_s`, s.
    pub fn age_s(&self, now_s: f64) -> f64 {
        (now_s - self.t_s).max(0.0)
    }
    /// Usable for control at `now_s`: not bad, a finite value with a finite time stamp, and not
    /// older than `max_age_s`.
    pub fn usable(&self, now_s: f64, max_age_s: f64) -> bool {
        self.quality != Quality::Bad && self.value.is_finite() && self.t_s.is_finite() && self.age_s(now_s) <= max_age_s
    }
}

/// CDU alarm bits (the same bits the Modbus alarm word carries).
pub mod cdu_alarm {
    /// Secondary flow below 50 % of its setpoint.
    pub const LOW_FLOW: u16 = 1 << 0;
    /// Supply temperature more than 2 K above its setpoint.
    pub const HIGH_SUPPLY_TEMP: u16 = 1 << 1;
    /// Leak detected.
    pub const LEAK: u16 = 1 << 2;
    /// A pump has tripped.
    pub const PUMP_FAULT: u16 = 1 << 3;
    /// A sensor reports a sentinel or implausible value.
    pub const SENSOR_FAULT: u16 = 1 << 4;
    /// Running on local default setpoints because the supervisor's heartbeat timed out.
    pub const BMS_TIMEOUT: u16 = 1 << 5;
    /// Facility valve fully open and supply still above setpoint.
    pub const VALVE_SATURATED: u16 = 1 << 6;
}

/// GPU clock-event reason bits (as DCGM / nvidia-smi report them).
pub mod clock_event {
    /// Clocks limited by the software power cap.
    pub const SW_POWER_CAP: u8 = 1 << 0;
    /// Hardware slowdown (thermal, at or above the slowdown temperature).
    pub const HW_SLOWDOWN: u8 = 1 << 1;
    /// Software thermal slowdown (near the limit).
    pub const SW_THERMAL: u8 = 1 << 2;
    /// Hardware thermal shutdown: the GPU is off.
    pub const HW_THERMAL: u8 = 1 << 3;
}

/// What a CDU reports.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct CduMeasurement {
    /// Secondary supply temperature, °C.
    pub supply_temp_c: Reading,
    /// Secondary return temperature, °C.
    pub return_temp_c: Reading,
    /// Secondary flow, L/min.
    pub flow_lpm: Reading,
    /// Facility water inlet temperature, °C.
    pub facility_in_temp_c: Reading,
    /// Heat transferred to facility water, kW (computed by the CDU from flow and ΔT).
    pub heat_kw: Reading,
    /// Pump speed, %.
    pub pump_speed_pct: Reading,
    /// Facility-side valve position, %.
    pub valve_pct: Reading,
    /// Pump electric power, kW.
    pub pump_power_kw: Reading,
    /// Supply setpoint in force, °C.
    pub supply_setpoint_c: Reading,
    /// Flow setpoint in force, L/min.
    pub flow_setpoint_lpm: Reading,
    /// Alarm bits ([`cdu_alarm`]).
    pub alarms: u16,
    /// True while the CDU runs on its local defaults after a BMS timeout.
    pub local_fallback: bool,
    /// The tank this CDU serves, where the CDU is a two-phase immersion tank's condenser-water
    /// skid (`None` for a CDU of cold-plate racks).
    #[serde(default)]
    pub tank: Option<TankMeasurement>,
}

/// What a two-phase immersion tank reports (its condenser-water skid is the CDU it belongs to).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct TankMeasurement {
    /// Tank pressure above atmospheric, kPa.
    pub pressure_gauge_kpa: Reading,
    /// Liquid pool temperature, °C (the saturation temperature while the tank is at or above
    /// atmospheric pressure).
    pub pool_temp_c: Reading,
    /// Fluid charge, % of the commissioned charge.
    pub fluid_level_pct: Reading,
    /// Relief valve open (venting vapour).
    pub venting: bool,
}

/// What a hall's facility water system and heat rejection report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct FacilityMeasurement {
    /// Facility supply temperature, °C.
    pub supply_temp_c: Reading,
    /// Facility return temperature, °C.
    pub return_temp_c: Reading,
    /// Facility flow, L/min.
    pub flow_lpm: Reading,
    /// Supply setpoint in force, °C.
    pub supply_setpoint_c: Reading,
    /// Heat-rejection fan speed, %.
    pub fan_speed_pct: Reading,
    /// Adiabatic pre-cooling on.
    pub adiabatic_on: bool,
    /// Trim chiller on.
    pub chiller_on: bool,
    /// Heat-rejection mode in force (`None`: the device does not report one; during a BMS
    /// fallback it reads back `Auto`).
    #[serde(default)]
    pub rejection_mode: Option<RejectionMode>,
    /// Heat-rejection fan power, kW.
    pub fan_power_kw: Reading,
    /// Facility pump power, kW.
    pub pump_power_kw: Reading,
    /// Chiller electric power, kW.
    pub chiller_power_kw: Reading,
    /// Electric power of the heat-reuse heat pump, kW (0 where the hall has none; a load that
    /// follows district heating's demand, not the cooling).
    #[serde(default)]
    pub heat_pump_power_kw: Reading,
    /// Outdoor dry-bulb at the plant's weather station, °C.
    pub outdoor_dry_bulb_c: Reading,
    /// Outdoor wet-bulb at the plant's weather station, °C.
    pub outdoor_wet_bulb_c: Reading,
    /// True while running on the local default setpoint after a BMS timeout.
    pub local_fallback: bool,
}

/// Aggregates a rack's node agents report with its per-GPU arrays.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct RackMeasurement {
    /// Rack input power (PDU meter), kW.
    pub it_power_kw: Reading,
    /// Coolant inlet temperature, °C.
    pub inlet_temp_c: Reading,
    /// Coolant outlet temperature, °C.
    pub outlet_temp_c: Reading,
    /// Hottest GPU die temperature reported in the rack, °C.
    pub gpu_temp_max_c: Reading,
}

/// Per-GPU telemetry, flat over all GPUs of the site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GpuTelemetry {
    /// Sampling time of the arrays, s.
    pub t_s: f64,
    /// Die temperature as reported (integer °C, biased per GPU), °C.
    pub temp_c: Vec<f32>,
    /// Power draw, W.
    pub power_w: Vec<f32>,
    /// Utilisation, 0–1.
    pub util: Vec<f32>,
    /// Power limit in force (after clamping by the device), W.
    pub power_limit_w: Vec<f32>,
    /// Clock-event reason bits ([`clock_event`]).
    pub clock_events: Vec<u8>,
}

/// Site electrical meters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct MeterMeasurement {
    /// Utility meter (total facility power), kW.
    pub facility_power_kw: Reading,
    /// Sum of rack input meters (IT power), kW.
    pub it_power_kw: Reading,
    /// Site power budget currently in force (contract / demand response), kW.
    pub power_budget_kw: Reading,
}

/// Everything the plant's sensors report at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Measurements {
    /// Plant time of this snapshot, s.
    pub t_s: f64,
    /// One entry per CDU, in topology order.
    pub cdus: Vec<CduMeasurement>,
    /// One entry per hall.
    pub facilities: Vec<FacilityMeasurement>,
    /// One entry per rack.
    pub racks: Vec<RackMeasurement>,
    /// Per-GPU arrays.
    pub gpus: GpuTelemetry,
    /// Site meters.
    pub meter: MeterMeasurement,
}

/// A supervisory command to one CDU for this tick.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct CduCommand {
    /// Write a new supply setpoint, °C (`None`: no write this tick).
    pub supply_temp_setpoint_c: Option<f64>,
    /// Write a new flow setpoint, L/min (`None`: no write this tick).
    pub flow_setpoint_lpm: Option<f64>,
    /// Refresh the BMS heartbeat.
    pub heartbeat: bool,
}

/// How a hall's heat rejection may run, as the supervisor commands it (a holding register of
/// the facility water system; the firmware reverts to [`RejectionMode::Auto`] when the BMS
/// heartbeat times out).
///
/// In every mode the firmware still holds the facility supply setpoint with its fans and stages
/// the trim chiller, where there is one, when the heat rejection has stayed saturated above the
/// setpoint. Dry takes the assist away: on a hall without a trim chiller nothing stands behind
/// the fans, so the controller never commands dry there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RejectionMode {
    /// The firmware stages adiabatic assist itself: on after the fans have been saturated above
    /// the setpoint for 5 minutes, off when dry air alone could hold the setpoint again.
    #[default]
    Auto,
    /// Dry coolers only: adiabatic assist held off (no water); if the fans cannot hold the
    /// setpoint the trim chiller stages instead.
    Dry,
    /// Adiabatic assist held on (the pads wetted, water used) for as long as the mode stands.
    Adiabatic,
}

impl RejectionMode {
    /// The register value: 0 auto, 1 dry, 2 adiabatic.
    pub fn code(self) -> u16 {
        match self {
            Self::Auto => 0,
            Self::Dry => 1,
            Self::Adiabatic => 2,
        }
    }

    /// The mode for a register value (`None` for a value no mode has).
    pub fn from_code(code: u16) -> Option<Self> {
        match code {
            0 => Some(Self::Auto),
            1 => Some(Self::Dry),
            2 => Some(Self::Adiabatic),
            _ => None,
        }
    }

    /// Lower-case name, as on the wire and in plans.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Dry => "dry",
            Self::Adiabatic => "adiabatic",
        }
    }
}

/// A supervisory command to one hall's facility water system.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct FacilityCommand {
    /// Write a new facility supply setpoint, °C.
    pub supply_temp_setpoint_c: Option<f64>,
    /// Write a new heat-rejection mode (`None`: no write this tick).
    #[serde(default)]
    pub rejection_mode: Option<RejectionMode>,
    /// Refresh the BMS heartbeat.
    pub heartbeat: bool,
}

/// New power limits for the GPUs of one rack (the node agents clamp them to the device limits).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RackPowerLimits {
    /// Rack index.
    pub rack: u32,
    /// One limit per GPU of the rack, W.
    pub limits_w: Vec<f32>,
}

/// Placement advice for the cluster scheduler: racks in order of preference for new jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PlacementAdvice {
    /// Rack indices, most preferred first. Racks not listed come after, in index order.
    pub rack_order: Vec<u32>,
}

/// Everything the control side asks of the plant for one tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Actions {
    /// One command per CDU (an empty vector sends nothing, not even a heartbeat).
    pub cdus: Vec<CduCommand>,
    /// One command per hall's facility water system.
    pub facilities: Vec<FacilityCommand>,
    /// Power-limit changes.
    pub power_limits: Vec<RackPowerLimits>,
    /// Placement advice, if the policy gives any.
    pub placement: Option<PlacementAdvice>,
}

impl Actions {
    /// Number of setpoint writes this tick (heartbeats excluded).
    pub fn setpoint_writes(&self) -> usize {
        self.cdus
            .iter()
            .map(|c| c.supply_temp_setpoint_c.is_some() as usize + c.flow_setpoint_lpm.is_some() as usize)
            .sum::<usize>()
            + self
                .facilities
                .iter()
                .map(|f| f.supply_temp_setpoint_c.is_some() as usize + f.rejection_mode.is_some() as usize)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_without_a_finite_time_stamp_is_not_usable() {
        // NaN - NaN ages clamp to 0 with `max`: the time stamp itself must be checked.
        assert!(!Reading::good(40.0, f64::NAN).usable(100.0, 180.0));
        assert!(!Reading::good(40.0, f64::NEG_INFINITY).usable(100.0, 180.0));
        assert!(Reading::good(40.0, 50.0).usable(100.0, 180.0));
        assert!(!Reading::good(40.0, -100.0).usable(100.0, 180.0));
        assert!(!Reading::good(f64::NAN, 100.0).usable(100.0, 180.0));
    }
}
