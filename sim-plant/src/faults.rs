//! Faults injectable on a schedule: equipment failures, sensor failures, communication loss and
//! external events (heat wave, power-budget cut, load storm).

use serde::{Deserialize, Serialize};

/// A sensor the fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "point", content = "index")]
pub enum SensorPoint {
    /// Supply temperature of CDU n.
    CduSupplyTemp(u32),
    /// Return temperature of CDU n.
    CduReturnTemp(u32),
    /// Secondary flow of CDU n.
    CduFlow(u32),
    /// Facility supply temperature of hall n.
    FacilitySupplyTemp(u32),
    /// Die temperature of GPU n.
    GpuTemp(u32),
    /// Pressure gauge of the two-phase immersion tank on CDU n (its condenser-water skid); a
    /// fault on a CDU without a tank changes nothing.
    TankPressure(u32),
}

/// How a sensor fails.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "mode")]
pub enum SensorFailure {
    /// Keeps reporting the value it had when the fault began.
    Stuck,
    /// Adds an offset growing at this rate, K (or % for flow) per hour.
    Drift {
        /// Rate per hour.
        rate_per_h: f64,
    },
    /// Reports nothing (quality bad, last value kept with its old time stamp).
    Dropout,
    /// Reports the "no value" sentinel (0x7FFF): NaN, quality uncertain.
    Sentinel,
}

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", deny_unknown_fields)]
pub enum FaultKind {
    /// The lead pump of a CDU trips; the standby pump starts after the failover delay (if any).
    PumpTrip {
        /// CDU index.
        cdu: u32,
    },
    /// The facility valve of a CDU sticks at a position.
    ValveStuck {
        /// CDU index.
        cdu: u32,
        /// Stuck position, fraction open.
        position: f64,
    },
    /// Extra fouling of a CDU's heat exchanger: UA reduced by this percentage.
    HxFouling {
        /// CDU index.
        cdu: u32,
        /// UA lost, %.
        ua_loss_pct: f64,
    },
    /// A CDU stops communicating: it ignores commands (so its BMS timeout runs) and reports nothing.
    CduOffline {
        /// CDU index.
        cdu: u32,
    },
    /// A fraction of a hall's heat-rejection fans fail.
    FanFailure {
        /// Hall index.
        hall: u32,
        /// Fraction of fan capacity lost (0–1).
        fraction: f64,
    },
    /// Every device stops communicating (supervisor network down).
    CommsLoss,
    /// A sensor misbehaves.
    Sensor {
        /// Which sensor.
        point: SensorPoint,
        /// How.
        failure: SensorFailure,
    },
    /// Outdoor air hotter by this offset (both dry- and wet-bulb), K.
    HeatWave {
        /// Offset, K.
        offset_k: f64,
    },
    /// The site power budget falls to this value, kW.
    BudgetCut {
        /// New budget, kW.
        budget_kw: f64,
    },
    /// Every GPU with a job runs at this utilisation.
    LoadStorm {
        /// Utilisation, 0–1.
        util: f64,
    },
}

/// A fault with its time window (plant time, s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledFault {
    /// Start, s of plant time.
    pub start_s: f64,
    /// End, s of plant time (`None`: until the end of the run).
    #[serde(default)]
    pub end_s: Option<f64>,
    /// The fault.
    pub fault: FaultKind,
}

impl ScheduledFault {
    /// Whether the fault is in force at `t_s`.
    pub fn active(&self, t_s: f64) -> bool {
        t_s >= self.start_s && self.end_s.is_none_or(|e| t_s < e)
    }
}
