//! The point names the supervisor reads and writes, per device role: the one list that the process
//! image ([`crate::image`]), the daemon's map check at start-up and `coolplane map check` share.
//!
//! A register map ([`crate::regmap`]) may name its points freely; the supervisor only looks for
//! the names below. A point that is required for a role is one without which the daemon refuses
//! the map (the controller could only run that equipment on design setpoints). An optional point
//! that is missing reads as a bad value (NaN): what that costs is stated per point
//! ([`PointSpec::if_missing`]). `docs/point-names.md` is the same list for people.
//!
//! Values are engineering values after the map's `scale` and `offset`, in the unit the name ends
//! with (`_c` °C, `_lpm` L/min, `_kw` kW, `_kpa` kPa, `_pct` %). Flags (`local_fallback`,
//! `chiller_on`, `tank_venting`, ...) are 1 for true and 0 for false.

use crate::regmap::RegisterMap;
use serde::Serialize;

/// Point names of a CDU (and of a two-phase immersion tank's condenser-water skid).
pub mod cdu {
    /// Secondary supply temperature, °C.
    pub const SUPPLY_TEMP_C: &str = "supply_temp_c";
    /// Secondary return temperature, °C.
    pub const RETURN_TEMP_C: &str = "return_temp_c";
    /// Secondary flow, L/min.
    pub const FLOW_LPM: &str = "flow_lpm";
    /// Facility water inlet temperature, °C.
    pub const FACILITY_IN_TEMP_C: &str = "facility_in_temp_c";
    /// Heat to facility water, kW.
    pub const HEAT_KW: &str = "heat_kw";
    /// Pump speed, %.
    pub const PUMP_SPEED_PCT: &str = "pump_speed_pct";
    /// Facility-side valve position, %.
    pub const VALVE_PCT: &str = "valve_pct";
    /// Pump electric power, kW.
    pub const PUMP_POWER_KW: &str = "pump_power_kw";
    /// Supply temperature setpoint in force (read-back), °C.
    pub const SUPPLY_SETPOINT_ACTIVE_C: &str = "supply_setpoint_active_c";
    /// Flow setpoint in force (read-back), L/min.
    pub const FLOW_SETPOINT_ACTIVE_LPM: &str = "flow_setpoint_active_lpm";
    /// Alarm bit field (`coolplane_core::signals::cdu_alarm`).
    pub const ALARMS: &str = "alarms";
    /// 1 while the CDU runs on its local defaults after a heartbeat timeout.
    pub const LOCAL_FALLBACK: &str = "local_fallback";
    /// Supply temperature setpoint the supervisor writes, °C.
    pub const SUPPLY_SETPOINT_C: &str = "supply_setpoint_c";
    /// Flow setpoint the supervisor writes, L/min.
    pub const FLOW_SETPOINT_LPM: &str = "flow_setpoint_lpm";
    /// Heartbeat counter the supervisor writes every tick.
    pub const HEARTBEAT: &str = "heartbeat";
}

/// Point names a two-phase immersion tank adds to its skid's CDU points.
pub mod tank {
    /// Tank pressure above atmospheric, kPa. Its presence marks a map as a tank's.
    pub const PRESSURE_GAUGE_KPA: &str = "tank_pressure_gauge_kpa";
    /// Liquid pool temperature, °C.
    pub const POOL_TEMP_C: &str = "tank_pool_temp_c";
    /// Fluid charge, % of the commissioned charge.
    pub const FLUID_LEVEL_PCT: &str = "tank_fluid_level_pct";
    /// 1 while the relief valve vents vapour.
    pub const VENTING: &str = "tank_venting";
}

/// Point names of a hall's facility water system.
pub mod facility {
    /// Facility water supply temperature, °C.
    pub const SUPPLY_TEMP_C: &str = "supply_temp_c";
    /// Facility water return temperature, °C.
    pub const RETURN_TEMP_C: &str = "return_temp_c";
    /// Facility water flow, L/min.
    pub const FLOW_LPM: &str = "flow_lpm";
    /// Supply temperature setpoint in force (read-back), °C.
    pub const SUPPLY_SETPOINT_ACTIVE_C: &str = "supply_setpoint_active_c";
    /// Heat-rejection fan speed, %.
    pub const FAN_SPEED_PCT: &str = "fan_speed_pct";
    /// 1 while adiabatic pre-cooling runs.
    pub const ADIABATIC_ON: &str = "adiabatic_on";
    /// 1 while the trim chiller runs.
    pub const CHILLER_ON: &str = "chiller_on";
    /// Fan electric power, kW.
    pub const FAN_POWER_KW: &str = "fan_power_kw";
    /// Facility pump electric power, kW.
    pub const PUMP_POWER_KW: &str = "pump_power_kw";
    /// Chiller electric power, kW.
    pub const CHILLER_POWER_KW: &str = "chiller_power_kw";
    /// Heat-reuse heat pump electric power, kW.
    pub const HEAT_PUMP_POWER_KW: &str = "heat_pump_power_kw";
    /// Outdoor dry-bulb temperature, °C.
    pub const OUTDOOR_DRY_BULB_C: &str = "outdoor_dry_bulb_c";
    /// Outdoor wet-bulb temperature, °C.
    pub const OUTDOOR_WET_BULB_C: &str = "outdoor_wet_bulb_c";
    /// 1 while the system runs on its local defaults after a heartbeat timeout.
    pub const LOCAL_FALLBACK: &str = "local_fallback";
    /// Heat-rejection mode in force (0 auto, 1 dry, 2 adiabatic).
    pub const REJECTION_MODE_ACTIVE: &str = "rejection_mode_active";
    /// Supply temperature setpoint the supervisor writes, °C.
    pub const SUPPLY_SETPOINT_C: &str = "supply_setpoint_c";
    /// Heat-rejection mode the supervisor writes (0 auto, 1 dry, 2 adiabatic).
    pub const REJECTION_MODE: &str = "rejection_mode";
    /// Heartbeat counter the supervisor writes every tick.
    pub const HEARTBEAT: &str = "heartbeat";
}

/// Point names of the site meter.
pub mod meter {
    /// Utility-meter (facility) power, kW.
    pub const FACILITY_POWER_KW: &str = "facility_power_kw";
    /// IT power at rack input, kW.
    pub const IT_POWER_KW: &str = "it_power_kw";
    /// Site power budget in force, kW.
    pub const POWER_BUDGET_KW: &str = "power_budget_kw";
}

/// What a device is to the supervisor, as far as its register map goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// A CDU.
    Cdu,
    /// A two-phase immersion tank's condenser-water skid: a CDU's points plus the tank's (the
    /// daemon configures it as a `cdu` device).
    Tank,
    /// A hall's facility water system.
    Facility,
    /// The site meter.
    Meter,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 4] = [Role::Cdu, Role::Tank, Role::Facility, Role::Meter];

    /// The role's name on the command line (`cdu`, `tank`, `facility`, `meter`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Cdu => "cdu",
            Role::Tank => "tank",
            Role::Facility => "facility",
            Role::Meter => "meter",
        }
    }

    /// Parses a role name (`cdu`, `tank`, `facility`, `meter`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The points the supervisor reads or writes on a device of this role (a tank: the CDU's
    /// then the tank's).
    pub fn points(self) -> Vec<&'static PointSpec> {
        match self {
            Role::Cdu => CDU.iter().collect(),
            Role::Tank => CDU.iter().chain(TANK).collect(),
            Role::Facility => FACILITY.iter().collect(),
            Role::Meter => METER.iter().collect(),
        }
    }

    /// Names of the points a map must have for this role, with whether each must be writable.
    pub fn required(self) -> Vec<(&'static str, bool)> {
        self.points()
            .into_iter()
            .filter(|p| p.need == Need::Required)
            .map(|p| (p.name, p.writable))
            .collect()
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a role needs a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Need {
    /// The daemon refuses a map without it.
    Required,
    /// Used when present; a missing one reads as a bad value.
    Optional,
}

/// What a point's `min`/`max` should be in a map.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Range {
    /// Nothing expected.
    None,
    /// A plausible range on a reading: a value outside it is marked bad instead of acted on (a
    /// temperature sensor answering 3,276.6 °C).
    Plausible,
    /// Write limits on a setpoint: values outside are refused before they leave the supervisor.
    WriteLimits,
    /// The register must accept every value of this range (the heartbeat: a 16-bit counter that
    /// wraps from 65535 to 0).
    Accepts(f64, f64),
}

/// One point the supervisor looks for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PointSpec {
    /// The name it must have in the map.
    pub name: &'static str,
    /// Required or optional.
    pub need: Need,
    /// Written by the supervisor (the map must mark it `writable = true`).
    pub writable: bool,
    /// Engineering unit expected after scale and offset (empty: a flag, a counter or a bit field).
    pub unit: &'static str,
    /// What `min`/`max` should say.
    pub range: Range,
    /// What the supervisor does with it.
    pub used_for: &'static str,
    /// What happens when the map lacks it.
    pub if_missing: &'static str,
}

const fn read(
    name: &'static str,
    need: Need,
    unit: &'static str,
    range: Range,
    used_for: &'static str,
    if_missing: &'static str,
) -> PointSpec {
    PointSpec {
        name,
        need,
        writable: false,
        unit,
        range,
        used_for,
        if_missing,
    }
}

const fn write(
    name: &'static str,
    unit: &'static str,
    range: Range,
    used_for: &'static str,
    if_missing: &'static str,
) -> PointSpec {
    PointSpec {
        name,
        need: Need::Required,
        writable: true,
        unit,
        range,
        used_for,
        if_missing,
    }
}

use Need::{Optional, Required};

const REFUSED: &str = "the daemon refuses the map at start-up";

/// A CDU's points.
pub const CDU: &[PointSpec] = &[
    read(
        cdu::SUPPLY_TEMP_C,
        Required,
        "°C",
        Range::Plausible,
        "freshness of the CDU (with flow and its racks' GPU telemetry), trim-respond's supply check, the twin, the page",
        REFUSED,
    ),
    read(
        cdu::RETURN_TEMP_C,
        Required,
        "°C",
        Range::Plausible,
        "the twin's heat estimate and sensor checks, the page",
        REFUSED,
    ),
    read(
        cdu::FLOW_LPM,
        Required,
        "L/min",
        Range::None,
        "freshness of the CDU, the twin's flow and heat estimates, the page",
        REFUSED,
    ),
    write(
        cdu::SUPPLY_SETPOINT_C,
        "°C",
        Range::WriteLimits,
        "the supply temperature setpoint the controller writes (on change)",
        REFUSED,
    ),
    write(
        cdu::FLOW_SETPOINT_LPM,
        "L/min",
        Range::WriteLimits,
        "the flow setpoint the controller writes (on change)",
        REFUSED,
    ),
    write(
        cdu::HEARTBEAT,
        "",
        Range::Accepts(0.0, 65535.0),
        "a counter written every tick, wrapping 65535 -> 0: the device's BMS watchdog",
        "the daemon refuses the map at start-up (without it the CDU would time out the supervisor and run on its local defaults)",
    ),
    read(
        cdu::SUPPLY_SETPOINT_ACTIVE_C,
        Optional,
        "°C",
        Range::Plausible,
        "read-back of the supply setpoint in force: the controller writes only when it differs",
        "the controller queues the supply setpoint every tick (the device link still sends only a changed value)",
    ),
    read(
        cdu::FLOW_SETPOINT_ACTIVE_LPM,
        Optional,
        "L/min",
        Range::None,
        "read-back of the flow setpoint in force",
        "the controller queues the flow setpoint every tick (the device link still sends only a changed value)",
    ),
    read(
        cdu::VALVE_PCT,
        Optional,
        "%",
        Range::None,
        "trim-respond's requests for colder facility water (a valve near 100 % asks), the twin's HX estimate",
        "an unknown valve counts as a wide-open one: trim-respond keeps the hall's facility water colder than needed",
    ),
    read(
        cdu::PUMP_POWER_KW,
        Optional,
        "kW",
        Range::None,
        "the hall's measured cooling power, on which trim-respond judges a warmer facility water setpoint; the page",
        "trim-respond never trims the hall's facility water warmer (it cannot judge the trim)",
    ),
    read(
        cdu::HEAT_KW,
        Optional,
        "kW",
        Range::None,
        "the budget ledger's observed heat and the CDU's cooling headroom when it struggles with a GPU near slowdown; the page, history",
        "no observed heat for the ledger; a struggling CDU with a GPU near slowdown is cut to the heat its flow and supply and return temperatures give, and held where the ledger stands (no new grants) if those are missing too",
    ),
    read(
        cdu::ALARMS,
        Optional,
        "",
        Range::None,
        "alarm bit field (coolplane_core::signals::cdu_alarm): high supply, saturated valve and pump fault hold the CDU's budget headroom (no new grants), and cut it to the heat it moves when a GPU on it nears slowdown; the page, MQTT",
        "no alarms are seen (all read as 0)",
    ),
    read(
        cdu::LOCAL_FALLBACK,
        Optional,
        "",
        Range::Plausible,
        "1 while the CDU runs on its local defaults (heartbeat timed out): cuts its budget headroom, shown to operators",
        "a CDU in local fallback is not seen as such",
    ),
    read(
        cdu::FACILITY_IN_TEMP_C,
        Optional,
        "°C",
        Range::Plausible,
        "the twin's heat-exchanger estimate",
        "the twin does not estimate the CDU's heat exchanger",
    ),
    read(
        cdu::PUMP_SPEED_PCT,
        Optional,
        "%",
        Range::None,
        "the twin's pump curve (flow against speed)",
        "the twin does not fit the pump curve",
    ),
];

/// The points a two-phase immersion tank adds to its skid's CDU points.
pub const TANK: &[PointSpec] = &[
    read(
        tank::PRESSURE_GAUGE_KPA,
        Required,
        "kPa",
        Range::None,
        "the tank pressure guard (colder condenser water, full flow before the relief valve vents) and trim-respond's tank requests",
        "the daemon refuses the map for a CDU in a hall of immersion tanks at start-up (read as a plain CDU there would be no pressure guard, and trim-respond would take the unknown pressure as a high one: coldest condenser water)",
    ),
    read(
        tank::POOL_TEMP_C,
        Optional,
        "°C",
        Range::Plausible,
        "the process image's tank state; the tank pressure guard's second path (through the fluid's saturation curve: acted on where it and the gauge are more than 1 kPa apart, smoothed over 10 min, and when the gauge is lost); `coordinated`'s over-limit check (the same cross-check); trim-respond's tank pressure when the gauge is lost; the twin's check of the gauge",
        "read as a bad value (the guard then has the gauge alone, and says so)",
    ),
    read(
        tank::FLUID_LEVEL_PCT,
        Optional,
        "%",
        Range::None,
        "the process image's tank state (fluid lost)",
        "read as a bad value",
    ),
    read(
        tank::VENTING,
        Optional,
        "",
        Range::Plausible,
        "1 while the relief valve vents",
        "venting is not seen",
    ),
];

/// A facility water system's points.
pub const FACILITY: &[PointSpec] = &[
    read(
        facility::SUPPLY_TEMP_C,
        Required,
        "°C",
        Range::Plausible,
        "freshness of the hall (a stale hall gets the design facility setpoint), the budget ledger, the page",
        REFUSED,
    ),
    read(
        facility::RETURN_TEMP_C,
        Required,
        "°C",
        Range::Plausible,
        "the page, history, `coordinated`'s facility-rise fit and a heat-reuse heat pump's source water (the sensor must sit upstream of the heat pump's evaporator)",
        REFUSED,
    ),
    write(
        facility::SUPPLY_SETPOINT_C,
        "°C",
        Range::WriteLimits,
        "the facility water supply setpoint the controller writes (on change)",
        REFUSED,
    ),
    write(
        facility::HEARTBEAT,
        "",
        Range::Accepts(0.0, 65535.0),
        "a counter written every tick, wrapping 65535 -> 0: the system's BMS watchdog",
        "the daemon refuses the map at start-up (without it the system would time out the supervisor and run on its local defaults)",
    ),
    read(
        facility::FLOW_LPM,
        Optional,
        "L/min",
        Range::None,
        "the twin's heat-exchanger estimate, the page",
        "read as a bad value; the twin does not estimate the heat exchangers",
    ),
    read(
        facility::SUPPLY_SETPOINT_ACTIVE_C,
        Optional,
        "°C",
        Range::Plausible,
        "read-back of the supply setpoint in force: the controller writes only when it differs",
        "the controller queues the supply setpoint every tick (the device link still sends only a changed value)",
    ),
    read(
        facility::FAN_POWER_KW,
        Optional,
        "kW",
        Range::None,
        "the hall's measured cooling power (trim-respond's facility trim), the twin, the page",
        "trim-respond never trims the hall's facility water warmer (it cannot judge the trim)",
    ),
    read(
        facility::PUMP_POWER_KW,
        Optional,
        "kW",
        Range::None,
        "the hall's measured cooling power (trim-respond's facility trim), the twin, the page",
        "trim-respond never trims the hall's facility water warmer (it cannot judge the trim)",
    ),
    read(
        facility::CHILLER_POWER_KW,
        Optional,
        "kW",
        Range::None,
        "the hall's measured cooling power (trim-respond's facility trim), the twin, the page",
        "trim-respond never trims the hall's facility water warmer (it cannot judge the trim)",
    ),
    read(
        facility::HEAT_PUMP_POWER_KW,
        Optional,
        "kW",
        Range::None,
        "the twin (a heat-reuse heat pump's power is a load it cannot learn from the weather: it subtracts it from the facility meter), `coordinated` (its power at each candidate's return water), MQTT operator state, history, metrics and the web page (apart from the losses)",
        "read as a bad value: on a heat-reuse site the twin then learns the heat pump into the rest of the overhead, `coordinated` keeps the facility water at or above design, and the operator's losses include it",
    ),
    read(
        facility::FAN_SPEED_PCT,
        Optional,
        "%",
        Range::None,
        "the twin, MQTT operator state",
        "read as a bad value",
    ),
    read(
        facility::ADIABATIC_ON,
        Optional,
        "",
        Range::Plausible,
        "MQTT operator state",
        "read as off",
    ),
    read(
        facility::CHILLER_ON,
        Optional,
        "",
        Range::Plausible,
        "MQTT operator state",
        "read as off",
    ),
    read(
        facility::OUTDOOR_DRY_BULB_C,
        Optional,
        "°C",
        Range::Plausible,
        "the twin's what-if of facility setpoints",
        "the twin's what-if has no weather",
    ),
    read(
        facility::OUTDOOR_WET_BULB_C,
        Optional,
        "°C",
        Range::Plausible,
        "the twin's what-if of facility setpoints",
        "the twin's what-if has no weather",
    ),
    read(
        facility::LOCAL_FALLBACK,
        Optional,
        "",
        Range::Plausible,
        "1 while the system runs on its local defaults, shown to operators",
        "a system in local fallback is not seen as such",
    ),
    PointSpec {
        name: facility::REJECTION_MODE,
        need: Optional,
        writable: true,
        unit: "",
        range: Range::Accepts(0.0, 2.0),
        used_for: "the heat-rejection mode the controller writes on change (0 auto, 1 dry, 2 adiabatic; auto in safe mode and on stale data)",
        if_missing: "the mode writes are refused and counted; the firmware stages its adiabatic assist itself",
    },
    read(
        facility::REJECTION_MODE_ACTIVE,
        Optional,
        "",
        Range::Plausible,
        "read-back of the mode in force: the controller writes only when it differs, and again after a fallback",
        "the controller writes the mode when it changes and after a fallback",
    ),
];

/// The site meter's points.
pub const METER: &[PointSpec] = &[
    read(
        meter::FACILITY_POWER_KW,
        Required,
        "kW",
        Range::None,
        "PUE, the budget ledger's site overhead and staleness, the twin, the page",
        REFUSED,
    ),
    read(
        meter::IT_POWER_KW,
        Required,
        "kW",
        Range::None,
        "PUE, the budget ledger's site overhead, the twin, the page",
        REFUSED,
    ),
    read(
        meter::POWER_BUDGET_KW,
        Optional,
        "kW",
        Range::None,
        "the site's power budget in force (a utility's demand response lowers it)",
        "the budget ledger keeps the site file's power_budget_kw",
    ),
];

/// The reference of every role's points as Markdown tables (what `coolplane map points` prints and
/// `docs/point-names.md` holds): one table per role, a tank's listing only what it adds to a CDU.
pub fn reference_markdown() -> String {
    let mut out = String::new();
    for (title, pts) in [
        ("CDU (`--role cdu`, daemon role `cdu`)", CDU),
        (
            "Two-phase immersion tank (`--role tank`, daemon role `cdu` in a hall with immersion tanks): every CDU point, plus",
            TANK,
        ),
        ("Facility water system (`--role facility`, daemon role `facility`)", FACILITY),
        ("Site meter (`--role meter`, daemon role `meter`)", METER),
    ] {
        out.push_str(&format!("### {title}\n\n"));
        out.push_str("| point | need | unit | min/max in the map | used for | when the map lacks it |\n");
        out.push_str("|---|---|---|---|---|---|\n");
        for p in pts {
            let need = match (p.need, p.writable) {
                (Need::Required, true) => "required, writable",
                (Need::Required, false) => "required",
                (Need::Optional, _) => "optional",
            };
            let range = match p.range {
                Range::None => "—".to_string(),
                Range::Plausible => "plausible range (a reading outside is marked bad)".to_string(),
                Range::WriteLimits => "write limits (a value outside is never sent)".to_string(),
                Range::Accepts(lo, hi) => format!("must accept {lo}–{hi}"),
            };
            let unit = if p.unit.is_empty() { "—" } else { p.unit };
            out.push_str(&format!(
                "| `{}` | {need} | {unit} | {range} | {} | {} |\n",
                p.name, p.used_for, p.if_missing
            ));
        }
        out.push('\n');
    }
    out
}

/// Units written differently that mean the same (map files are free text).
fn same_unit(expected: &str, got: &str) -> bool {
    let norm = |u: &str| {
        let u = u.trim().to_ascii_lowercase().replace(' ', "");
        match u.as_str() {
            "c" | "degc" | "°c" | "celsius" => "°c".to_string(),
            "l/min" | "lpm" | "l/m" => "l/min".to_string(),
            "percent" | "pct" => "%".to_string(),
            _ => u,
        }
    };
    norm(expected) == norm(got)
}

/// One finding of [`check_map`] about a point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The point's name.
    pub point: String,
    /// What is wrong, and what it costs.
    pub message: String,
}

/// What [`check_map`] found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MapCheck {
    /// The role checked for.
    pub role: Role,
    /// Required points the map lacks (the daemon refuses the map).
    pub missing_required: Vec<PointSpec>,
    /// Other faults that make the daemon refuse the map (a required point not writable, a
    /// heartbeat register that cannot hold the counter).
    pub errors: Vec<Finding>,
    /// Optional points the map lacks.
    pub missing_optional: Vec<PointSpec>,
    /// Points the map has without the `min`/`max` the role expects, units that differ from the
    /// expected one, optional points that should be writable and are not.
    pub warnings: Vec<Finding>,
    /// Points of the map the supervisor does not read for this role.
    pub unused: Vec<String>,
}

impl MapCheck {
    /// Whether the daemon accepts the map for the role.
    pub fn ok(&self) -> bool {
        self.missing_required.is_empty() && self.errors.is_empty()
    }

    /// One line naming every point that makes the map unusable for the role (`None` when it is
    /// usable).
    pub fn refusal(&self) -> Option<String> {
        if self.ok() {
            return None;
        }
        let mut parts: Vec<String> = self
            .missing_required
            .iter()
            .map(|p| format!("`{}`{}", p.name, if p.writable { " (writable)" } else { "" }))
            .collect();
        let mut text = String::new();
        if !parts.is_empty() {
            text = format!("lacks point(s) a {} needs: {}", self.role, parts.join(", "));
        }
        parts = self
            .errors
            .iter()
            .map(|f| format!("`{}`: {}", f.point, f.message))
            .collect();
        if !parts.is_empty() {
            if !text.is_empty() {
                text.push_str("; ");
            }
            text.push_str(&parts.join("; "));
        }
        Some(text)
    }
}

/// Check a register map against what the supervisor needs of a device of `role`.
pub fn check_map(map: &RegisterMap, role: Role) -> MapCheck {
    let mut c = MapCheck {
        role,
        missing_required: Vec::new(),
        errors: Vec::new(),
        missing_optional: Vec::new(),
        warnings: Vec::new(),
        unused: Vec::new(),
    };
    let specs = role.points();
    for s in &specs {
        let Some(p) = map.point(s.name) else {
            match s.need {
                Need::Required => c.missing_required.push(**s),
                Need::Optional => c.missing_optional.push(**s),
            }
            continue;
        };
        let finding = |message: String| Finding {
            point: s.name.to_string(),
            message,
        };
        if s.writable && !p.writable {
            c.errors.push(finding(
                "the supervisor writes it: the map must say `writable = true`".into(),
            ));
        }
        if !s.unit.is_empty() && !p.unit.is_empty() && !same_unit(s.unit, &p.unit) {
            c.warnings.push(finding(format!(
                "unit `{}` in the map; the supervisor takes it as {} (convert with scale and offset)",
                p.unit, s.unit
            )));
        }
        match s.range {
            Range::None => {}
            Range::Plausible => {
                if p.min.is_none() || p.max.is_none() {
                    c.warnings.push(finding(format!(
                        "no plausible range (min and max): a reading outside the sensor's range is acted on instead of marked bad{}",
                        if s.unit == "°C" { " (the shipped maps use min = -10.0, max = 120.0)" } else { " (a flag: min = 0, max = 1)" }
                    )));
                }
            }
            Range::WriteLimits => {
                if p.min.is_none() || p.max.is_none() {
                    c.warnings.push(finding(
                        "no write limits (min and max): only the register's range and the site's limits stop a bad setpoint before the device"
                            .into(),
                    ));
                }
            }
            Range::Accepts(lo, hi) => {
                let (rlo, rhi) = p.representable_range();
                let lim_ok = p.min.is_none_or(|m| m <= lo) && p.max.is_none_or(|m| m >= hi);
                if rlo > lo || rhi < hi || !lim_ok || p.is_register_bit() {
                    c.errors.push(finding(format!(
                        "must accept every value from {lo} to {hi} (the supervisor writes a counter that wraps at 65535): \
                         type {}, scale {}, min {:?}, max {:?}",
                        p.value_type, p.scale, p.min, p.max
                    )));
                }
            }
        }
    }
    c.unused = map
        .points
        .iter()
        .filter(|p| !specs.iter().any(|s| s.name == p.name))
        .map(|p| p.name.clone())
        .collect();
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    const CDU_MAP: &str = include_str!("../../maps/coolplane-cdu.toml");
    const FACILITY_MAP: &str = include_str!("../../maps/coolplane-facility.toml");
    const METER_MAP: &str = include_str!("../../maps/coolplane-meter.toml");
    const TANK_MAP: &str = include_str!("../../maps/coolplane-2pic-tank.toml");
    const VENDOR_MAP: &str = include_str!("../../maps/example-vendor-cdu.toml");

    fn map(text: &str) -> RegisterMap {
        RegisterMap::from_toml_str("t.toml", text).unwrap()
    }

    #[test]
    fn names_are_unique_per_role_and_follow_the_unit_convention() {
        for role in Role::ALL {
            let pts = role.points();
            for (i, p) in pts.iter().enumerate() {
                assert!(!pts[..i].iter().any(|q| q.name == p.name), "{role}: {} twice", p.name);
                let suffix = match p.unit {
                    "°C" => "_c",
                    "L/min" => "_lpm",
                    "kW" => "_kw",
                    "kPa" => "_kpa",
                    "%" => "_pct",
                    _ => "",
                };
                assert!(p.name.ends_with(suffix), "{role}: {} in {}", p.name, p.unit);
                assert!(p.writable == matches!(p.range, Range::WriteLimits | Range::Accepts(..)));
            }
            assert!(role.points().iter().any(|p| p.need == Need::Required));
        }
        assert_eq!(Role::from_name("tank"), Some(Role::Tank));
        assert_eq!(Role::from_name("chiller"), None);
    }

    #[test]
    fn every_shipped_map_serves_its_role_fully() {
        for (text, role) in [
            (CDU_MAP, Role::Cdu),
            (FACILITY_MAP, Role::Facility),
            (METER_MAP, Role::Meter),
            (TANK_MAP, Role::Tank),
            (TANK_MAP, Role::Cdu),
        ] {
            let c = check_map(&map(text), role);
            assert!(c.ok(), "{role}: {:?}", c.refusal());
            assert!(c.missing_optional.is_empty(), "{role}: {:?}", c.missing_optional);
            assert!(c.warnings.is_empty(), "{role}: {:?}", c.warnings);
        }
        // A plain CDU map is not a tank's.
        let c = check_map(&map(CDU_MAP), Role::Tank);
        assert_eq!(c.missing_required.len(), 1);
        assert_eq!(c.missing_required[0].name, tank::PRESSURE_GAUGE_KPA);
    }

    #[test]
    fn the_reference_in_the_docs_is_this_list() {
        let doc = include_str!("../../docs/point-names.md");
        let begin = "<!-- generated: coolplane map points -->\n";
        let end = "<!-- end of generated -->";
        let a = doc.find(begin).expect("begin marker") + begin.len();
        let b = doc.find(end).expect("end marker");
        assert!(
            doc[a..b] == reference_markdown(),
            "docs/point-names.md is out of date: replace its generated part with `coolplane map points`"
        );
    }

    #[test]
    fn the_vendor_example_serves_a_cdu() {
        let c = check_map(&map(VENDOR_MAP), Role::Cdu);
        assert!(c.ok(), "{:?}", c.refusal());
        assert!(c.unused.iter().any(|n| n == "supply_temp_f"), "{:?}", c.unused);
    }

    #[test]
    fn faults_are_named() {
        // A read-only heartbeat, an 8-bit-limited heartbeat, a setpoint without limits, a °F
        // supply temperature without a plausible range, a missing flow.
        let text = CDU_MAP
            .replacen("name = \"flow_lpm\"", "name = \"flow_x\"", 1)
            .replace(
                "name = \"heartbeat\"\ndescription = \"Supervisor heartbeat: incremented by the supervisor on every cycle, wrapping 65535 -> 0\"\ntable = \"holding\"\naddress = 2\ntype = \"u16\"\nwritable = true\nmin = 0\nmax = 65535",
                "name = \"heartbeat\"\ntable = \"holding\"\naddress = 2\ntype = \"u16\"\nwritable = true\nmin = 0\nmax = 255",
            );
        let c = check_map(&map(&text), Role::Cdu);
        assert!(!c.ok());
        assert_eq!(
            c.missing_required.iter().map(|p| p.name).collect::<Vec<_>>(),
            ["flow_lpm"]
        );
        assert!(
            c.errors
                .iter()
                .any(|f| f.point == "heartbeat" && f.message.contains("65535")),
            "{:?}",
            c.errors
        );
        let r = c.refusal().unwrap();
        assert!(r.contains("`flow_lpm`") && r.contains("`heartbeat`"), "{r}");
        let text = CDU_MAP.replacen("writable = true\nmin = 5.0\nmax = 60.0", "writable = false", 1);
        let c = check_map(&map(&text), Role::Cdu);
        assert!(
            c.errors
                .iter()
                .any(|f| f.point == "supply_setpoint_c" && f.message.contains("writable")),
            "{:?}",
            c.errors
        );
        let text = CDU_MAP.replacen("unit = \"°C\"\ntable = \"input\"\naddress = 0\ntype = \"i16\"\nmin = -10.0   # plausible range: a reading outside is bad\nmax = 120.0", "unit = \"°F\"\ntable = \"input\"\naddress = 0\ntype = \"i16\"", 1);
        let c = check_map(&map(&text), Role::Cdu);
        assert!(c.ok());
        let w: Vec<_> = c.warnings.iter().filter(|f| f.point == "supply_temp_c").collect();
        assert_eq!(w.len(), 2, "{:?}", c.warnings);
    }
}
