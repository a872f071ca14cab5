//! Time series recorded during a scenario run, written as CSV and plotted.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// One recorded sample (site totals and extremes), units in the names.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct SeriesRow {
    /// Hours since the start of the scored window (negative during warm-up).
    pub t_h: f64,
    /// IT power at rack input, kW.
    pub it_kw: f64,
    /// Utility-meter power, kW.
    pub facility_kw: f64,
    /// All cooling power, kW.
    pub cooling_kw: f64,
    /// CDU pumps, kW.
    pub cdu_pumps_kw: f64,
    /// Facility pumps, kW.
    pub facility_pumps_kw: f64,
    /// Heat-rejection fans, kW.
    pub rejection_fans_kw: f64,
    /// Chiller, kW.
    pub chiller_kw: f64,
    /// Air-handler fans, kW.
    pub air_handler_kw: f64,
    /// Cooling of the electrical rooms, kW.
    pub elec_room_cooling_kw: f64,
    /// Electrical losses, kW.
    pub electrical_losses_kw: f64,
    /// Instantaneous PUE.
    pub pue: f64,
    /// Hottest true GPU die temperature, °C.
    pub gpu_temp_max_c: f64,
    /// GPU slowdown temperature, °C.
    pub gpu_slowdown_c: f64,
    /// Mean CDU supply temperature, °C (true).
    pub cdu_supply_mean_c: f64,
    /// Highest CDU supply temperature, °C (true).
    pub cdu_supply_max_c: f64,
    /// Mean CDU supply setpoint in force, °C.
    pub cdu_supply_setpoint_mean_c: f64,
    /// Total CDU secondary flow, L/min (true).
    pub cdu_flow_total_lpm: f64,
    /// Mean facility supply temperature, °C (true).
    pub facility_supply_mean_c: f64,
    /// Mean facility supply setpoint in force, °C.
    pub facility_setpoint_mean_c: f64,
    /// Outdoor dry-bulb, °C.
    pub dry_bulb_c: f64,
    /// Outdoor wet-bulb, °C.
    pub wet_bulb_c: f64,
    /// GPUs allocated to jobs.
    pub busy_gpus: f64,
    /// Site power budget, kW.
    pub budget_kw: f64,
    /// Halls with adiabatic pre-cooling on, fraction 0–1.
    pub adiabatic_on: f64,
    /// Halls with the trim chiller on, fraction 0–1.
    pub chiller_on: f64,
}

impl SeriesRow {
    /// Column names, in CSV order.
    pub const COLUMNS: [&'static str; 26] = [
        "t_h",
        "it_kw",
        "facility_kw",
        "cooling_kw",
        "cdu_pumps_kw",
        "facility_pumps_kw",
        "rejection_fans_kw",
        "chiller_kw",
        "air_handler_kw",
        "elec_room_cooling_kw",
        "electrical_losses_kw",
        "pue",
        "gpu_temp_max_c",
        "gpu_slowdown_c",
        "cdu_supply_mean_c",
        "cdu_supply_max_c",
        "cdu_supply_setpoint_mean_c",
        "cdu_flow_total_lpm",
        "facility_supply_mean_c",
        "facility_setpoint_mean_c",
        "dry_bulb_c",
        "wet_bulb_c",
        "busy_gpus",
        "budget_kw",
        "adiabatic_on",
        "chiller_on",
    ];

    /// Values in CSV order.
    pub fn values(&self) -> [f64; 26] {
        [
            self.t_h,
            self.it_kw,
            self.facility_kw,
            self.cooling_kw,
            self.cdu_pumps_kw,
            self.facility_pumps_kw,
            self.rejection_fans_kw,
            self.chiller_kw,
            self.air_handler_kw,
            self.elec_room_cooling_kw,
            self.electrical_losses_kw,
            self.pue,
            self.gpu_temp_max_c,
            self.gpu_slowdown_c,
            self.cdu_supply_mean_c,
            self.cdu_supply_max_c,
            self.cdu_supply_setpoint_mean_c,
            self.cdu_flow_total_lpm,
            self.facility_supply_mean_c,
            self.facility_setpoint_mean_c,
            self.dry_bulb_c,
            self.wet_bulb_c,
            self.busy_gpus,
            self.budget_kw,
            self.adiabatic_on,
            self.chiller_on,
        ]
    }
}

/// A recorded run: rows in time order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TimeSeries {
    /// Samples.
    pub rows: Vec<SeriesRow>,
}

impl TimeSeries {
    /// CSV text with a header line.
    pub fn to_csv(&self) -> String {
        let mut s = SeriesRow::COLUMNS.join(",");
        s.push('\n');
        for r in &self.rows {
            let v = r.values();
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                let _ = write!(s, "{x:.4}");
            }
            s.push('\n');
        }
        s
    }
}
