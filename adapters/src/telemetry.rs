//! MQTT wire format for rack telemetry and per-GPU power-limit commands.
//!
//! Pure code: topic layout ([`Topics`]), JSON payload encoding and strict parsing
//! ([`parse_rack_telemetry`], [`parse_power_limit_command`], [`parse_power_limit_result`]) and
//! RFC 3339 timestamps ([`format_rfc3339_ms`], [`parse_rfc3339`]). No IO and no clock: times are
//! passed in as Unix milliseconds.
//!
//! Layout under the root `coolplane/v1/{site}` (see `shared/design/protocols.md`, MQTT part):
//!
//! | topic                            | payload                                    |
//! |----------------------------------|--------------------------------------------|
//! | `…/rack/{rack}/telemetry`        | [`RackTelemetry`], one message per interval |
//! | `…/rack/{rack}/power_limit/set`  | [`PowerLimitCommand`]                      |
//! | `…/rack/{rack}/power_limit`      | [`PowerLimitResult`] (what was applied)    |
//! | `…/status`                       | `online` / `offline`, retained, Last Will  |
//!
//! Parsing never panics and never trusts the payload: every failure is a [`TelemetryError`] that
//! names the offending field, and [`TelemetryError::reason`] gives a short stable label for a
//! per-reason counter. Unknown JSON fields are ignored (forward compatibility); unknown
//! clock-event reason names are counted, not rejected.
//!
//! The decoder walks the JSON once with a hand-written `serde` visitor: strings are borrowed from
//! the payload where possible, numeric arrays are collected straight into pre-sized vectors and
//! clock-event reason names are folded into [`clock_event`] bits without allocating per GPU.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use coolplane_core::signals::clock_event;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Serialize, Serializer};

/// Largest payload the parsers accept, bytes (a 72-GPU rack message is a few KiB).
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;
/// Lowest plausible temperature (die, coolant, slowdown limit), °C.
pub const TEMP_MIN_C: f64 = -40.0;
/// Highest plausible temperature (die, coolant, slowdown limit), °C.
pub const TEMP_MAX_C: f64 = 150.0;
/// Highest plausible per-GPU power draw or power limit, W.
pub const GPU_POWER_MAX_W: f64 = 5_000.0;
/// Highest plausible rack input power, kW.
pub const RACK_POWER_MAX_KW: f64 = 2_000.0;

/// Vectors are pre-sized to the expected GPU count, but never beyond this many entries.
const MAX_PREALLOC: usize = 4_096;
/// Strings copied from a payload into an error message are cut to this many bytes.
const MAX_ECHO_BYTES: usize = 160;

// ---------------------------------------------------------------------------------------------
// Topics
// ---------------------------------------------------------------------------------------------

/// Topic layout of one site: every helper builds a topic under [`Topics::root`].
///
/// Names passed in (site, rack, CDU, severity) must be valid single topic levels
/// ([`is_valid_level`]); the helpers do not check them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    /// `coolplane/v1/{site}`.
    pub root: String,
}

/// Which rack topic a topic is (see [`Topics::rack_topic`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RackTopic {
    /// `…/rack/{rack}/telemetry`.
    Telemetry,
    /// `…/rack/{rack}/power_limit/set`.
    PowerLimitSet,
    /// `…/rack/{rack}/power_limit`.
    PowerLimitResult,
}

/// True when `name` can be used as one MQTT topic level: non-empty, and free of the level
/// separator `/`, the wildcards `+` and `#`, and NUL.
pub fn is_valid_level(name: &str) -> bool {
    !name.is_empty() && !name.bytes().any(|b| matches!(b, b'/' | b'+' | b'#' | 0))
}

impl Topics {
    /// The layout for `site`: root `coolplane/v1/{site}`.
    pub fn new(site: &str) -> Self {
        Self {
            root: format!("coolplane/v1/{site}"),
        }
    }

    /// `…/rack/{rack}/telemetry`: rack telemetry published by node agents.
    pub fn rack_telemetry(&self, rack: &str) -> String {
        format!("{}/rack/{rack}/telemetry", self.root)
    }

    /// `…/rack/+/telemetry`: subscription filter for every rack's telemetry.
    pub fn rack_telemetry_filter(&self) -> String {
        format!("{}/rack/+/telemetry", self.root)
    }

    /// `…/rack/{rack}/power_limit/set`: power-limit command to a rack's agent.
    pub fn power_limit_set(&self, rack: &str) -> String {
        format!("{}/rack/{rack}/power_limit/set", self.root)
    }

    /// `…/rack/+/power_limit/set`: subscription filter for every rack's power-limit commands.
    pub fn power_limit_set_filter(&self) -> String {
        format!("{}/rack/+/power_limit/set", self.root)
    }

    /// `…/rack/{rack}/power_limit`: the limits an agent actually applied.
    pub fn power_limit_result(&self, rack: &str) -> String {
        format!("{}/rack/{rack}/power_limit", self.root)
    }

    /// `…/rack/+/power_limit`: subscription filter for every rack's applied limits.
    pub fn power_limit_result_filter(&self) -> String {
        format!("{}/rack/+/power_limit", self.root)
    }

    /// `…/status`: the controller's availability (Last Will; retained `online` / `offline`).
    pub fn status(&self) -> String {
        format!("{}/status", self.root)
    }

    /// `…/site/state`: retained site state for dashboards.
    pub fn site_state(&self) -> String {
        format!("{}/site/state", self.root)
    }

    /// `…/cdu/{cdu}/state`: retained state of one CDU.
    pub fn cdu_state(&self, cdu: &str) -> String {
        format!("{}/cdu/{cdu}/state", self.root)
    }

    /// `…/controller/mode`: retained controller mode.
    pub fn controller_mode(&self) -> String {
        format!("{}/controller/mode", self.root)
    }
    /// The controller's latest energy plan (retained JSON; policies that make one).
    pub fn controller_plan(&self) -> String {
        format!("{}/controller/plan", self.root)
    }

    /// `…/event/{severity}`: alarms, mode changes, fail-safe entries, budget cuts.
    pub fn event(&self, severity: &str) -> String {
        format!("{}/event/{severity}", self.root)
    }

    /// The rack name and kind of a telemetry or power-limit topic of this site, if `topic`
    /// matches the layout exactly (no wildcards, no empty rack name, no extra levels).
    pub fn rack_topic<'t>(&self, topic: &'t str) -> Option<(&'t str, RackTopic)> {
        let rest = topic.strip_prefix(self.root.as_str())?.strip_prefix("/rack/")?;
        let (rack, suffix) = rest.split_once('/')?;
        if !is_valid_level(rack) {
            return None;
        }
        let kind = match suffix {
            "telemetry" => RackTopic::Telemetry,
            "power_limit/set" => RackTopic::PowerLimitSet,
            "power_limit" => RackTopic::PowerLimitResult,
            _ => return None,
        };
        Some((rack, kind))
    }

    /// The rack name from a telemetry or power-limit topic, if it matches the layout (rejects
    /// wildcards, empty names, extra levels and other sites).
    pub fn rack_of<'t>(&self, topic: &'t str) -> Option<&'t str> {
        self.rack_topic(topic).map(|(rack, _)| rack)
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why a payload was rejected. Every message names the field involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TelemetryError {
    /// The payload exceeds [`MAX_PAYLOAD_BYTES`].
    #[error("payload is {len} bytes, larger than the {max}-byte limit")]
    TooLarge {
        /// Payload length, bytes.
        len: usize,
        /// The limit, bytes.
        max: usize,
    },
    /// The payload is empty (for example a cleared retained message).
    #[error("payload is empty")]
    Empty,
    /// The payload is not UTF-8.
    #[error("payload is not UTF-8 (invalid byte at offset {valid_up_to})")]
    NotUtf8 {
        /// Length of the valid UTF-8 prefix, bytes.
        valid_up_to: usize,
    },
    /// The payload is not a JSON object (syntax error, truncation, trailing data, or a
    /// top-level value that is not an object).
    #[error("payload is not valid JSON{}: {detail}", in_field(*.field))]
    Json {
        /// Line of the error (1-based), as serde_json reports it.
        line: usize,
        /// Column of the error (1-based; 0 at the very start), as serde_json reports it.
        column: usize,
        /// The field whose value was being read, if any.
        field: Option<&'static str>,
        /// serde_json's message (with line and column), possibly shortened.
        detail: String,
    },
    /// A required field is absent.
    #[error("missing field `{field}`")]
    MissingField {
        /// The field.
        field: &'static str,
    },
    /// A field appears more than once.
    #[error("field `{field}` appears more than once")]
    DuplicateField {
        /// The field.
        field: &'static str,
    },
    /// A field's value has the wrong JSON type (for example `"NaN"` where a number belongs).
    #[error("field `{field}` has the wrong type: {detail}")]
    WrongType {
        /// The field.
        field: &'static str,
        /// serde_json's message (with line and column), possibly shortened.
        detail: String,
    },
    /// A per-GPU array does not have one entry per GPU.
    #[error("array `{field}` has {got} entries, expected {expected} (one per GPU)")]
    Length {
        /// The array.
        field: &'static str,
        /// Entries found.
        got: usize,
        /// GPUs the rack has.
        expected: usize,
    },
    /// Not exactly one of `gpu_temp_c` and `gpu_temp_margin_c` is present.
    #[error(
        "exactly one of `gpu_temp_c` and `gpu_temp_margin_c` is required, found {}",
        if *.both { "both" } else { "neither" }
    )]
    TemperatureFields {
        /// True when both were present, false when neither was.
        both: bool,
    },
    /// A number is not finite or outside its physical range.
    #[error("field `{field}{}` = {value} is not finite or outside the physical range {min}..={max}", at_index(*.index))]
    Range {
        /// The field (`slowdown_c` for the caller's site limit).
        field: &'static str,
        /// Position in a per-GPU array, if the field is one.
        index: Option<usize>,
        /// The offending value.
        value: f64,
        /// Lowest accepted value.
        min: f64,
        /// Highest accepted value.
        max: f64,
    },
    /// A timestamp is not RFC 3339 (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±hh:mm)`).
    #[error("field `{field}` = {value:?} is not an RFC 3339 timestamp: {why}")]
    Timestamp {
        /// The field.
        field: &'static str,
        /// The text found (possibly shortened).
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A name that becomes a topic level is empty or contains `/`, `+`, `#` or NUL.
    #[error("field `{field}` = {value:?} is not a valid name (non-empty, no '/', '+', '#' or NUL)")]
    InvalidName {
        /// The field.
        field: &'static str,
        /// The text found (possibly shortened).
        value: String,
    },
}

fn in_field(field: Option<&'static str>) -> String {
    field.map(|f| format!(" (in field `{f}`)")).unwrap_or_default()
}

fn at_index(index: Option<usize>) -> String {
    index.map(|i| format!("[{i}]")).unwrap_or_default()
}

impl TelemetryError {
    /// Short stable label for a per-reason counter: `too_large`, `empty`, `utf8`, `json`,
    /// `missing`, `duplicate`, `type`, `length`, `temp_fields`, `range`, `timestamp`, `name`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::Empty => "empty",
            Self::NotUtf8 { .. } => "utf8",
            Self::Json { .. } => "json",
            Self::MissingField { .. } => "missing",
            Self::DuplicateField { .. } => "duplicate",
            Self::WrongType { .. } => "type",
            Self::Length { .. } => "length",
            Self::TemperatureFields { .. } => "temp_fields",
            Self::Range { .. } => "range",
            Self::Timestamp { .. } => "timestamp",
            Self::InvalidName { .. } => "name",
        }
    }

    /// The field the error is about, where there is one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Json { field, .. } => *field,
            Self::MissingField { field }
            | Self::DuplicateField { field }
            | Self::WrongType { field, .. }
            | Self::Length { field, .. }
            | Self::Range { field, .. }
            | Self::Timestamp { field, .. }
            | Self::InvalidName { field, .. } => Some(field),
            Self::TooLarge { .. } | Self::Empty | Self::NotUtf8 { .. } | Self::TemperatureFields { .. } => None,
        }
    }
}

/// `s` cut to at most [`MAX_ECHO_BYTES`] bytes on a character boundary, with `…` when cut.
fn clip(s: &str) -> String {
    if s.len() <= MAX_ECHO_BYTES {
        return s.to_owned();
    }
    let mut end = MAX_ECHO_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

// ---------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------

/// One rack's telemetry for one interval, as parsed (per-GPU arrays have one entry per GPU).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RackTelemetry {
    /// Sampling time, Unix ms (UTC).
    pub ts_unix_ms: i64,
    /// Rack name (as in the site file).
    pub rack: String,
    /// Sequence number from the agent (detects loss and reordering).
    pub seq: u64,
    /// Rack input power, kW.
    pub it_power_kw: f64,
    /// Coolant inlet temperature, °C.
    pub inlet_temp_c: f64,
    /// Coolant outlet temperature, °C.
    pub outlet_temp_c: f64,
    /// Per-GPU power draw, W.
    pub gpu_power_w: Vec<f32>,
    /// Per-GPU utilisation, 0–1 (the wire carries percent).
    pub gpu_util: Vec<f32>,
    /// Per-GPU power limit in force, W.
    pub gpu_power_limit_w: Vec<f32>,
    /// Per-GPU die temperature, °C, always absolute after parsing.
    pub gpu_temp_c: Vec<f32>,
    /// Per-GPU clock-event reason bits ([`clock_event`]).
    pub gpu_clock_events: Vec<u8>,
    /// True when the payload carried margins to the slowdown limit (converted on parsing).
    pub temps_were_margins: bool,
}

/// What [`parse_rack_telemetry_with_stats`] noticed in an accepted payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ParseStats {
    /// Clock-event reason names not known here (ignored, counted; not an error).
    pub unknown_clock_event_names: u32,
}

/// How [`encode_rack_telemetry`] reports GPU temperatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TempReport {
    /// Absolute die temperatures (`gpu_temp_c`).
    Absolute,
    /// Margins to the slowdown limit (`gpu_temp_margin_c`, with `gpu_slowdown_c`), as newer
    /// drivers report them.
    Margin,
}

/// Per-GPU power caps sent to a rack's agent on `…/rack/{rack}/power_limit/set`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PowerLimitCommand {
    /// Correlates the command with its [`PowerLimitResult`]; a valid topic level.
    pub request_id: String,
    /// Requested cap per GPU, W.
    pub limits_w: Vec<f32>,
    /// When the command was issued, Unix ms (UTC).
    pub ts_unix_ms: i64,
}

/// What a rack's agent actually applied, on `…/rack/{rack}/power_limit` (caps are clamped by the
/// device's range and by out-of-band limiters, so this is read back, not echoed).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PowerLimitResult {
    /// The request this answers.
    pub request_id: String,
    /// Cap in force per GPU, W.
    pub applied_w: Vec<f32>,
    /// When the limits were read back, Unix ms (UTC).
    pub ts_unix_ms: i64,
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

/// DCGM clock-event reason names and their bits, in encoding order.
const CLOCK_EVENT_NAMES: [(&str, u8); 4] = [
    ("SW_POWER_CAP", clock_event::SW_POWER_CAP),
    ("HW_SLOWDOWN", clock_event::HW_SLOWDOWN),
    ("SW_THERMAL", clock_event::SW_THERMAL),
    ("HW_THERMAL", clock_event::HW_THERMAL),
];

/// Serializes `values[i] * scale` as a JSON array.
struct Scaled<'a>(&'a [f32], f32);

impl Serialize for Scaled<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|v| v * self.1))
    }
}

/// Serializes `offset - values[i]` as a JSON array (absolute temperatures to margins).
struct Margins<'a>(&'a [f32], f32);

impl Serialize for Margins<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|t| self.1 - t))
    }
}

/// Serializes clock-event bits as one array of reason names per GPU.
struct EventNames<'a>(&'a [u8]);

struct OneGpuEvents(u8);

impl Serialize for OneGpuEvents {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            CLOCK_EVENT_NAMES
                .iter()
                .filter(|(_, bit)| self.0 & bit != 0)
                .map(|(name, _)| name),
        )
    }
}

impl Serialize for EventNames<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|&bits| OneGpuEvents(bits)))
    }
}

#[derive(Serialize)]
struct TelemetryOut<'a> {
    ts: String,
    rack: &'a str,
    seq: u64,
    it_power_kw: f64,
    inlet_temp_c: f64,
    outlet_temp_c: f64,
    gpu_power_w: &'a [f32],
    gpu_util_pct: Scaled<'a>,
    gpu_power_limit_w: &'a [f32],
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_temp_c: Option<&'a [f32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_temp_margin_c: Option<Margins<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_slowdown_c: Option<f32>,
    gpu_clock_events: EventNames<'a>,
}

#[derive(Serialize)]
struct CommandOut<'a> {
    ts: String,
    request_id: &'a str,
    limits_w: &'a [f32],
}

#[derive(Serialize)]
struct ResultOut<'a> {
    ts: String,
    request_id: &'a str,
    applied_w: &'a [f32],
}

/// Encode rack telemetry for publishing (the simulated racks use this): temperatures as absolute
/// values or as margins to `slowdown_c` (which is then sent as `gpu_slowdown_c`).
///
/// Utilisation goes out in percent; clock-event bits outside [`clock_event`] are dropped.
/// Non-finite numbers are written as `null`, which [`parse_rack_telemetry`] rejects.
pub fn encode_rack_telemetry(t: &RackTelemetry, temps: TempReport, slowdown_c: f32) -> Vec<u8> {
    let margins = temps == TempReport::Margin;
    let out = TelemetryOut {
        ts: format_rfc3339_ms(t.ts_unix_ms),
        rack: &t.rack,
        seq: t.seq,
        it_power_kw: t.it_power_kw,
        inlet_temp_c: t.inlet_temp_c,
        outlet_temp_c: t.outlet_temp_c,
        gpu_power_w: &t.gpu_power_w,
        gpu_util_pct: Scaled(&t.gpu_util, 100.0),
        gpu_power_limit_w: &t.gpu_power_limit_w,
        gpu_temp_c: (!margins).then_some(t.gpu_temp_c.as_slice()),
        gpu_temp_margin_c: margins.then_some(Margins(&t.gpu_temp_c, slowdown_c)),
        gpu_slowdown_c: margins.then_some(slowdown_c),
        gpu_clock_events: EventNames(&t.gpu_clock_events),
    };
    // Serializing these plain structs cannot fail; an empty payload would be rejected anyway.
    serde_json::to_vec(&out).unwrap_or_default()
}

/// Encode a power-limit command for `…/rack/{rack}/power_limit/set`.
pub fn encode_power_limit_command(cmd: &PowerLimitCommand) -> Vec<u8> {
    let out = CommandOut {
        ts: format_rfc3339_ms(cmd.ts_unix_ms),
        request_id: &cmd.request_id,
        limits_w: &cmd.limits_w,
    };
    serde_json::to_vec(&out).unwrap_or_default()
}

/// Encode an agent's answer for `…/rack/{rack}/power_limit`.
pub fn encode_power_limit_result(res: &PowerLimitResult) -> Vec<u8> {
    let out = ResultOut {
        ts: format_rfc3339_ms(res.ts_unix_ms),
        request_id: &res.request_id,
        applied_w: &res.applied_w,
    };
    serde_json::to_vec(&out).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Decoding: one borrowed pass over the JSON
// ---------------------------------------------------------------------------------------------

/// Which message is being decoded (decides which keys are known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Telemetry,
    Command,
    Result,
}

/// Every field of every message; the discriminant is its bit in [`Wire::seen`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Ts,
    Rack,
    Seq,
    ItPowerKw,
    InletTempC,
    OutletTempC,
    GpuPowerW,
    GpuUtilPct,
    GpuPowerLimitW,
    GpuTempC,
    GpuTempMarginC,
    GpuSlowdownC,
    GpuClockEvents,
    RequestId,
    LimitsW,
    AppliedW,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Self::Ts => "ts",
            Self::Rack => "rack",
            Self::Seq => "seq",
            Self::ItPowerKw => "it_power_kw",
            Self::InletTempC => "inlet_temp_c",
            Self::OutletTempC => "outlet_temp_c",
            Self::GpuPowerW => "gpu_power_w",
            Self::GpuUtilPct => "gpu_util_pct",
            Self::GpuPowerLimitW => "gpu_power_limit_w",
            Self::GpuTempC => "gpu_temp_c",
            Self::GpuTempMarginC => "gpu_temp_margin_c",
            Self::GpuSlowdownC => "gpu_slowdown_c",
            Self::GpuClockEvents => "gpu_clock_events",
            Self::RequestId => "request_id",
            Self::LimitsW => "limits_w",
            Self::AppliedW => "applied_w",
        }
    }

    fn lookup(kind: Kind, key: &str) -> Option<Self> {
        use Kind::{Command, Result, Telemetry};
        Some(match (kind, key) {
            (_, "ts") => Self::Ts,
            (Telemetry, "rack") => Self::Rack,
            (Telemetry, "seq") => Self::Seq,
            (Telemetry, "it_power_kw") => Self::ItPowerKw,
            (Telemetry, "inlet_temp_c") => Self::InletTempC,
            (Telemetry, "outlet_temp_c") => Self::OutletTempC,
            (Telemetry, "gpu_power_w") => Self::GpuPowerW,
            (Telemetry, "gpu_util_pct") => Self::GpuUtilPct,
            (Telemetry, "gpu_power_limit_w") => Self::GpuPowerLimitW,
            (Telemetry, "gpu_temp_c") => Self::GpuTempC,
            (Telemetry, "gpu_temp_margin_c") => Self::GpuTempMarginC,
            (Telemetry, "gpu_slowdown_c") => Self::GpuSlowdownC,
            (Telemetry, "gpu_clock_events") => Self::GpuClockEvents,
            (Command | Result, "request_id") => Self::RequestId,
            (Command, "limits_w") => Self::LimitsW,
            (Result, "applied_w") => Self::AppliedW,
            _ => return None,
        })
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// The fields found in one payload, before validation.
#[derive(Default)]
struct Wire<'a> {
    seen: u32,
    duplicate: Option<Field>,
    ts: Option<Cow<'a, str>>,
    rack: Option<Cow<'a, str>>,
    seq: Option<u64>,
    it_power_kw: Option<f64>,
    inlet_temp_c: Option<f64>,
    outlet_temp_c: Option<f64>,
    gpu_power_w: Option<Vec<f32>>,
    gpu_util_pct: Option<Vec<f32>>,
    gpu_power_limit_w: Option<Vec<f32>>,
    gpu_temp_c: Option<Vec<f32>>,
    gpu_temp_margin_c: Option<Vec<f32>>,
    gpu_slowdown_c: Option<f64>,
    gpu_clock_events: Option<Vec<u8>>,
    unknown_clock_event_names: u32,
    request_id: Option<Cow<'a, str>>,
    limits_w: Option<Vec<f32>>,
    applied_w: Option<Vec<f32>>,
}

/// Decodes the top-level object; `current` tracks the field whose value is being read so a
/// type error can name it.
struct WireSeed<'c> {
    kind: Kind,
    expected: usize,
    current: &'c Cell<Option<Field>>,
}

impl<'de> DeserializeSeed<'de> for WireSeed<'_> {
    type Value = Wire<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for WireSeed<'_> {
    type Value = Wire<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut w = Wire::default();
        let cap = self.expected.min(MAX_PREALLOC);
        while let Some(key) = map.next_key_seed(KeySeed(self.kind))? {
            let Some(field) = key else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            self.current.set(Some(field));
            if w.seen & field.bit() != 0 {
                w.duplicate.get_or_insert(field);
                map.next_value::<IgnoredAny>()?;
                self.current.set(None);
                continue;
            }
            w.seen |= field.bit();
            match field {
                Field::Ts => w.ts = Some(map.next_value_seed(CowStr)?),
                Field::Rack => w.rack = Some(map.next_value_seed(CowStr)?),
                Field::RequestId => w.request_id = Some(map.next_value_seed(CowStr)?),
                Field::Seq => w.seq = Some(map.next_value()?),
                Field::ItPowerKw => w.it_power_kw = Some(map.next_value()?),
                Field::InletTempC => w.inlet_temp_c = Some(map.next_value()?),
                Field::OutletTempC => w.outlet_temp_c = Some(map.next_value()?),
                // Optional: `null` counts as absent.
                Field::GpuSlowdownC => w.gpu_slowdown_c = map.next_value()?,
                Field::GpuPowerW => w.gpu_power_w = Some(map.next_value_seed(F32Array(cap))?),
                Field::GpuUtilPct => w.gpu_util_pct = Some(map.next_value_seed(F32Array(cap))?),
                Field::GpuPowerLimitW => w.gpu_power_limit_w = Some(map.next_value_seed(F32Array(cap))?),
                Field::GpuTempC => w.gpu_temp_c = Some(map.next_value_seed(F32Array(cap))?),
                Field::GpuTempMarginC => w.gpu_temp_margin_c = Some(map.next_value_seed(F32Array(cap))?),
                Field::LimitsW => w.limits_w = Some(map.next_value_seed(F32Array(cap))?),
                Field::AppliedW => w.applied_w = Some(map.next_value_seed(F32Array(cap))?),
                Field::GpuClockEvents => {
                    let (bits, unknown) = map.next_value_seed(EventsArray(cap))?;
                    w.gpu_clock_events = Some(bits);
                    w.unknown_clock_event_names = unknown;
                }
            }
            self.current.set(None);
        }
        Ok(w)
    }
}

/// Object key → known field (`None`: ignore the value).
struct KeySeed(Kind);

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Option<Field>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = Option<Field>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Field::lookup(self.0, v))
    }
}

/// A string borrowed from the payload when it has no escapes, owned otherwise.
struct CowStr;

impl<'de> DeserializeSeed<'de> for CowStr {
    type Value = Cow<'de, str>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for CowStr {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// An array of numbers into a vector pre-sized to the expected GPU count.
struct F32Array(usize);

impl<'de> DeserializeSeed<'de> for F32Array {
    type Value = Vec<f32>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for F32Array {
    type Value = Vec<f32>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of numbers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut v = Vec::with_capacity(self.0);
        while let Some(x) = seq.next_element::<f32>()? {
            v.push(x);
        }
        Ok(v)
    }
}

/// `[[names…], …]` into one bit set per GPU, plus the count of unknown names.
struct EventsArray(usize);

impl<'de> DeserializeSeed<'de> for EventsArray {
    type Value = (Vec<u8>, u32);
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsArray {
    type Value = (Vec<u8>, u32);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array with one array of clock-event reason names per GPU")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut bits = Vec::with_capacity(self.0);
        let mut unknown = 0u32;
        while let Some((b, u)) = seq.next_element_seed(GpuEvents)? {
            bits.push(b);
            unknown = unknown.saturating_add(u);
        }
        Ok((bits, unknown))
    }
}

/// One GPU's `[names…]` into bits and a count of unknown names.
struct GpuEvents;

impl<'de> DeserializeSeed<'de> for GpuEvents {
    type Value = (u8, u32);
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for GpuEvents {
    type Value = (u8, u32);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of clock-event reason names")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (mut bits, mut unknown) = (0u8, 0u32);
        while let Some(bit) = seq.next_element_seed(EventName)? {
            match bit {
                Some(b) => bits |= b,
                None => unknown = unknown.saturating_add(1),
            }
        }
        Ok((bits, unknown))
    }
}

/// One reason name → its bit (`None`: unknown name), without allocating.
struct EventName;

impl<'de> DeserializeSeed<'de> for EventName {
    type Value = Option<u8>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for EventName {
    type Value = Option<u8>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a clock-event reason name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(CLOCK_EVENT_NAMES
            .iter()
            .find(|(name, _)| *name == v)
            .map(|&(_, bit)| bit))
    }
}

/// Size, UTF-8 and JSON checks, then one pass collecting the known fields of `kind`.
fn decode(payload: &[u8], kind: Kind, expected: usize) -> Result<Wire<'_>, TelemetryError> {
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(TelemetryError::TooLarge {
            len: payload.len(),
            max: MAX_PAYLOAD_BYTES,
        });
    }
    if payload.is_empty() {
        return Err(TelemetryError::Empty);
    }
    let text = std::str::from_utf8(payload).map_err(|e| TelemetryError::NotUtf8 {
        valid_up_to: e.valid_up_to(),
    })?;
    let current = Cell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let seed = WireSeed {
        kind,
        expected,
        current: &current,
    };
    let wire = match seed.deserialize(&mut de).and_then(|w| de.end().map(|()| w)) {
        Ok(w) => w,
        Err(e) => return Err(json_error(&e, current.get())),
    };
    if let Some(field) = wire.duplicate {
        return Err(TelemetryError::DuplicateField { field: field.name() });
    }
    Ok(wire)
}

fn json_error(e: &serde_json::Error, field: Option<Field>) -> TelemetryError {
    let detail = clip(&e.to_string());
    match (e.classify(), field) {
        (serde_json::error::Category::Data, Some(f)) => TelemetryError::WrongType {
            field: f.name(),
            detail,
        },
        _ => TelemetryError::Json {
            line: e.line(),
            column: e.column(),
            field: field.map(Field::name),
            detail,
        },
    }
}

fn required<T>(v: Option<T>, field: Field) -> Result<T, TelemetryError> {
    v.ok_or(TelemetryError::MissingField { field: field.name() })
}

fn check_len<T>(field: Field, v: &[T], expected: usize) -> Result<(), TelemetryError> {
    if v.len() == expected {
        Ok(())
    } else {
        Err(TelemetryError::Length {
            field: field.name(),
            got: v.len(),
            expected,
        })
    }
}

fn check_value(
    field: &'static str,
    index: Option<usize>,
    value: f64,
    min: f64,
    max: f64,
) -> Result<(), TelemetryError> {
    // Written so that NaN fails too.
    if value >= min && value <= max {
        Ok(())
    } else {
        Err(TelemetryError::Range {
            field,
            index,
            value,
            min,
            max,
        })
    }
}

fn check_scalar(field: Field, value: f64, min: f64, max: f64) -> Result<(), TelemetryError> {
    check_value(field.name(), None, value, min, max)
}

fn check_array(field: Field, values: &[f32], min: f64, max: f64) -> Result<(), TelemetryError> {
    let (lo, hi) = (min as f32, max as f32);
    match values.iter().position(|&v| !(v >= lo && v <= hi)) {
        None => Ok(()),
        Some(i) => check_value(field.name(), Some(i), f64::from(values[i]), min, max),
    }
}

fn check_name(field: Field, value: &str) -> Result<(), TelemetryError> {
    if is_valid_level(value) {
        Ok(())
    } else {
        Err(TelemetryError::InvalidName {
            field: field.name(),
            value: clip(value),
        })
    }
}

fn check_ts(value: &str) -> Result<i64, TelemetryError> {
    parse_rfc3339(value)
}

/// Parse and validate one rack's telemetry.
///
/// `expected_gpus`: the number of GPUs the site file says the rack has (every per-GPU array must
/// have exactly that many entries); `slowdown_c`: the site's slowdown limit, used to convert
/// margins to absolute temperatures when the payload gives margins without `gpu_slowdown_c`.
///
/// Required: `ts`, `rack`, `seq`, `it_power_kw`, `inlet_temp_c`, `outlet_temp_c`,
/// `gpu_power_w`, `gpu_util_pct`, `gpu_power_limit_w`, `gpu_clock_events`, and exactly one of
/// `gpu_temp_c` / `gpu_temp_margin_c`. Optional: `gpu_slowdown_c`. Other fields are ignored.
/// Checking that `rack` matches the topic is the caller's business.
///
/// One bad value rejects the whole message: a per-GPU entry that is `null`, a string or out of
/// its physical range (see [`TelemetryError::Range`]) fails the rack's message for this interval.
pub fn parse_rack_telemetry(
    payload: &[u8],
    expected_gpus: usize,
    slowdown_c: f32,
) -> Result<RackTelemetry, TelemetryError> {
    parse_rack_telemetry_with_stats(payload, expected_gpus, slowdown_c).map(|(t, _)| t)
}

/// [`parse_rack_telemetry`], also returning what was tolerated (unknown clock-event names).
pub fn parse_rack_telemetry_with_stats(
    payload: &[u8],
    expected_gpus: usize,
    slowdown_c: f32,
) -> Result<(RackTelemetry, ParseStats), TelemetryError> {
    let w = decode(payload, Kind::Telemetry, expected_gpus)?;
    let ts = required(w.ts, Field::Ts)?;
    let rack = required(w.rack, Field::Rack)?;
    let seq = required(w.seq, Field::Seq)?;
    let it_power_kw = required(w.it_power_kw, Field::ItPowerKw)?;
    let inlet_temp_c = required(w.inlet_temp_c, Field::InletTempC)?;
    let outlet_temp_c = required(w.outlet_temp_c, Field::OutletTempC)?;
    let gpu_power_w = required(w.gpu_power_w, Field::GpuPowerW)?;
    let mut gpu_util = required(w.gpu_util_pct, Field::GpuUtilPct)?;
    let gpu_power_limit_w = required(w.gpu_power_limit_w, Field::GpuPowerLimitW)?;
    let gpu_clock_events = required(w.gpu_clock_events, Field::GpuClockEvents)?;
    let (mut gpu_temp_c, temps_were_margins) = match (w.gpu_temp_c, w.gpu_temp_margin_c) {
        (Some(t), None) => (t, false),
        (None, Some(m)) => (m, true),
        (Some(_), Some(_)) => return Err(TelemetryError::TemperatureFields { both: true }),
        (None, None) => return Err(TelemetryError::TemperatureFields { both: false }),
    };
    let temp_field = if temps_were_margins {
        Field::GpuTempMarginC
    } else {
        Field::GpuTempC
    };

    check_len(Field::GpuPowerW, &gpu_power_w, expected_gpus)?;
    check_len(Field::GpuUtilPct, &gpu_util, expected_gpus)?;
    check_len(Field::GpuPowerLimitW, &gpu_power_limit_w, expected_gpus)?;
    check_len(temp_field, &gpu_temp_c, expected_gpus)?;
    check_len(Field::GpuClockEvents, &gpu_clock_events, expected_gpus)?;

    let ts_unix_ms = check_ts(&ts)?;
    check_name(Field::Rack, &rack)?;
    check_scalar(Field::ItPowerKw, it_power_kw, 0.0, RACK_POWER_MAX_KW)?;
    check_scalar(Field::InletTempC, inlet_temp_c, TEMP_MIN_C, TEMP_MAX_C)?;
    check_scalar(Field::OutletTempC, outlet_temp_c, TEMP_MIN_C, TEMP_MAX_C)?;
    check_array(Field::GpuPowerW, &gpu_power_w, 0.0, GPU_POWER_MAX_W)?;
    check_array(Field::GpuUtilPct, &gpu_util, 0.0, 100.0)?;
    check_array(Field::GpuPowerLimitW, &gpu_power_limit_w, 0.0, GPU_POWER_MAX_W)?;
    if let Some(s) = w.gpu_slowdown_c {
        check_scalar(Field::GpuSlowdownC, s, TEMP_MIN_C, TEMP_MAX_C)?;
    }
    if temps_were_margins {
        let slowdown = match w.gpu_slowdown_c {
            Some(s) => s as f32,
            None => {
                check_value("slowdown_c", None, f64::from(slowdown_c), TEMP_MIN_C, TEMP_MAX_C)?;
                slowdown_c
            }
        };
        // absolute = slowdown − margin must lie in TEMP_MIN_C..=TEMP_MAX_C.
        let s = f64::from(slowdown);
        check_array(temp_field, &gpu_temp_c, s - TEMP_MAX_C, s - TEMP_MIN_C)?;
        for t in &mut gpu_temp_c {
            *t = slowdown - *t;
        }
    } else {
        check_array(temp_field, &gpu_temp_c, TEMP_MIN_C, TEMP_MAX_C)?;
    }
    for u in &mut gpu_util {
        *u /= 100.0;
    }

    let telemetry = RackTelemetry {
        ts_unix_ms,
        rack: rack.into_owned(),
        seq,
        it_power_kw,
        inlet_temp_c,
        outlet_temp_c,
        gpu_power_w,
        gpu_util,
        gpu_power_limit_w,
        gpu_temp_c,
        gpu_clock_events,
        temps_were_margins,
    };
    let stats = ParseStats {
        unknown_clock_event_names: w.unknown_clock_event_names,
    };
    Ok((telemetry, stats))
}

/// Shared part of the power-limit messages: `(request_id, limits, ts_unix_ms)`.
fn parse_limits(payload: &[u8], kind: Kind, expected_gpus: usize) -> Result<(String, Vec<f32>, i64), TelemetryError> {
    let w = decode(payload, kind, expected_gpus)?;
    let (field, limits) = match kind {
        Kind::Result => (Field::AppliedW, w.applied_w),
        _ => (Field::LimitsW, w.limits_w),
    };
    let ts = required(w.ts, Field::Ts)?;
    let request_id = required(w.request_id, Field::RequestId)?;
    let limits = required(limits, field)?;
    check_len(field, &limits, expected_gpus)?;
    let ts_unix_ms = check_ts(&ts)?;
    check_name(Field::RequestId, &request_id)?;
    check_array(field, &limits, 0.0, GPU_POWER_MAX_W)?;
    Ok((request_id.into_owned(), limits, ts_unix_ms))
}

/// Parse and validate a power-limit command (`ts`, `request_id`, `limits_w` with one cap per
/// GPU, each within 0..=[`GPU_POWER_MAX_W`]).
pub fn parse_power_limit_command(payload: &[u8], expected_gpus: usize) -> Result<PowerLimitCommand, TelemetryError> {
    let (request_id, limits_w, ts_unix_ms) = parse_limits(payload, Kind::Command, expected_gpus)?;
    Ok(PowerLimitCommand {
        request_id,
        limits_w,
        ts_unix_ms,
    })
}

/// Parse and validate an agent's answer (`ts`, `request_id`, `applied_w` with one cap per GPU,
/// each within 0..=[`GPU_POWER_MAX_W`]).
pub fn parse_power_limit_result(payload: &[u8], expected_gpus: usize) -> Result<PowerLimitResult, TelemetryError> {
    let (request_id, applied_w, ts_unix_ms) = parse_limits(payload, Kind::Result, expected_gpus)?;
    Ok(PowerLimitResult {
        request_id,
        applied_w,
        ts_unix_ms,
    })
}

// ---------------------------------------------------------------------------------------------
// RFC 3339
// ---------------------------------------------------------------------------------------------

const MS_PER_DAY: i64 = 86_400_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400; // [0, 399]
    let mp = i64::from((m + 9) % 12); // March = 0
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe - 719_468
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32; // [1, 12]
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => 0,
    }
}

/// First instant [`format_rfc3339_ms`] can write: 0000-01-01T00:00:00.000Z.
const MIN_RFC3339_MS: i64 = -62_167_219_200_000;
/// Last instant [`format_rfc3339_ms`] can write: 9999-12-31T23:59:59.999Z.
const MAX_RFC3339_MS: i64 = 253_402_300_799_999;

/// `unix_ms` as RFC 3339 UTC with milliseconds, e.g. `2026-11-29T21:10:00.000Z`.
///
/// Instants outside years 0000..=9999 are clamped to the nearest representable one, so the
/// output always parses with [`parse_rfc3339`].
pub fn format_rfc3339_ms(unix_ms: i64) -> String {
    let ms = unix_ms.clamp(MIN_RFC3339_MS, MAX_RFC3339_MS);
    let days = ms.div_euclid(MS_PER_DAY);
    let in_day = ms.rem_euclid(MS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss, mmm) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000,
    );
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{mmm:03}Z")
}

/// Parse an RFC 3339 timestamp to Unix ms (UTC).
///
/// Accepts `YYYY-MM-DDTHH:MM:SS`, optional fractional seconds of any length (truncated to
/// milliseconds), then `Z` or a `±hh:mm` offset; `T` and `Z` may be lower case. A leap second
/// (`:60`) is accepted only at 23:59 UTC and counts as the first second of the next day.
/// Anything else (missing `T`, missing offset, impossible dates such as 2026-02-30, hour 24,
/// trailing text) is a [`TelemetryError::Timestamp`] for field `ts`.
pub fn parse_rfc3339(s: &str) -> Result<i64, TelemetryError> {
    rfc3339_ms(s.as_bytes()).map_err(|why| TelemetryError::Timestamp {
        field: "ts",
        value: clip(s),
        why,
    })
}

const RFC3339_SHAPE: &str = "expected YYYY-MM-DDTHH:MM:SS[.fraction](Z|±hh:mm)";

/// The decimal value of `b[at..at + n]`, all ASCII digits.
fn digits(b: &[u8], at: usize, n: usize) -> Result<i64, &'static str> {
    let field = b.get(at..at + n).ok_or(RFC3339_SHAPE)?;
    field.iter().try_fold(0i64, |acc, &c| {
        if c.is_ascii_digit() {
            Ok(acc * 10 + i64::from(c - b'0'))
        } else {
            Err(RFC3339_SHAPE)
        }
    })
}

fn expect(b: &[u8], at: usize, what: &[u8]) -> Result<(), &'static str> {
    match b.get(at) {
        Some(c) if what.contains(c) => Ok(()),
        _ => Err(RFC3339_SHAPE),
    }
}

fn rfc3339_ms(b: &[u8]) -> Result<i64, &'static str> {
    let year = digits(b, 0, 4)?;
    expect(b, 4, b"-")?;
    let month = digits(b, 5, 2)?;
    expect(b, 7, b"-")?;
    let day = digits(b, 8, 2)?;
    expect(b, 10, b"Tt")?;
    let hour = digits(b, 11, 2)?;
    expect(b, 13, b":")?;
    let minute = digits(b, 14, 2)?;
    expect(b, 16, b":")?;
    let second = digits(b, 17, 2)?;

    let mut at = 19;
    let mut millis = 0i64;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while let Some(c) = b.get(at).filter(|c| c.is_ascii_digit()) {
            if at - start < 3 {
                millis = millis * 10 + i64::from(c - b'0');
            }
            at += 1;
        }
        match at - start {
            0 => return Err("fractional seconds need at least one digit"),
            1 => millis *= 100,
            2 => millis *= 10,
            _ => {}
        }
    }

    let offset_min = match b.get(at) {
        Some(b'Z' | b'z') => {
            at += 1;
            0
        }
        Some(&sign @ (b'+' | b'-')) => {
            let oh = digits(b, at + 1, 2)?;
            expect(b, at + 3, b":")?;
            let om = digits(b, at + 4, 2)?;
            if oh > 23 || om > 59 {
                return Err("offset out of range");
            }
            at += 6;
            if sign == b'-' {
                -(oh * 60 + om)
            } else {
                oh * 60 + om
            }
        }
        _ => return Err("missing time zone (Z or ±hh:mm)"),
    };
    if at != b.len() {
        return Err("unexpected text after the time zone");
    }

    let month = u32::try_from(month).map_err(|_| RFC3339_SHAPE)?;
    if !(1..=12).contains(&month) {
        return Err("month out of range");
    }
    let day = u32::try_from(day).map_err(|_| RFC3339_SHAPE)?;
    if day < 1 || day > days_in_month(year, month) {
        return Err("day out of range for the month");
    }
    if hour > 23 {
        return Err("hour out of range");
    }
    if minute > 59 {
        return Err("minute out of range");
    }
    let local_minute_of_day = hour * 60 + minute;
    if second > 60 || (second == 60 && (local_minute_of_day - offset_min).rem_euclid(1_440) != 1_439) {
        return Err("second out of range");
    }

    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + (local_minute_of_day - offset_min) * 60 + second;
    Ok(secs * 1_000 + millis)
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> RackTelemetry {
        RackTelemetry {
            ts_unix_ms: 1_795_986_600_123,
            rack: "hall-a-r001".into(),
            seq: 123,
            it_power_kw: 118.4,
            inlet_temp_c: 40.3,
            outlet_temp_c: 49.8,
            gpu_power_w: (0..n).map(|i| 700.0 + 3.5 * i as f32).collect(),
            gpu_util: (0..n).map(|i| (i % 101) as f32 / 100.0).collect(),
            gpu_power_limit_w: (0..n).map(|i| 1_000.0 - i as f32).collect(),
            gpu_temp_c: (0..n).map(|i| 55.0 + 0.37 * i as f32).collect(),
            gpu_clock_events: (0..n).map(|i| (i % 16) as u8).collect(),
            temps_were_margins: false,
        }
    }

    /// A valid 2-GPU telemetry payload with `field` replaced by `value` (raw JSON), or removed
    /// when `value` is `None`.
    fn payload_with(field: &str, value: Option<&str>) -> Vec<u8> {
        let fields = [
            ("ts", r#""2026-11-29T21:10:00.000Z""#),
            ("rack", r#""hall-a-r001""#),
            ("seq", "7"),
            ("it_power_kw", "118.4"),
            ("inlet_temp_c", "40.3"),
            ("outlet_temp_c", "49.8"),
            ("gpu_power_w", "[700.5, 650]"),
            ("gpu_util_pct", "[99.5, 0]"),
            ("gpu_power_limit_w", "[1000, 1000]"),
            ("gpu_temp_c", "[61.0, 58]"),
            ("gpu_clock_events", r#"[["SW_POWER_CAP"], []]"#),
        ];
        let mut parts: Vec<String> = fields
            .iter()
            .filter(|(k, _)| *k != field)
            .map(|(k, v)| format!("\"{k}\": {v}"))
            .collect();
        if let Some(v) = value {
            parts.push(format!("\"{field}\": {v}"));
        }
        format!("{{{}}}", parts.join(", ")).into_bytes()
    }

    fn err(payload: &[u8]) -> TelemetryError {
        match parse_rack_telemetry(payload, 2, 89.0) {
            Ok(t) => panic!("accepted {:?}: {t:?}", String::from_utf8_lossy(payload)),
            Err(e) => e,
        }
    }

    fn assert_err(e: &TelemetryError, reason: &str, field: &str) {
        assert_eq!(e.reason(), reason, "{e}");
        assert!(e.to_string().contains(field), "message does not name `{field}`: {e}");
    }

    #[test]
    fn baseline_payload_parses() {
        let t = parse_rack_telemetry(&payload_with("", None), 2, 89.0).unwrap();
        assert_eq!(t.ts_unix_ms, 1_795_986_600_000);
        assert_eq!(t.rack, "hall-a-r001");
        assert_eq!(t.seq, 7);
        assert_eq!(t.gpu_power_w, vec![700.5, 650.0]);
        assert!((t.gpu_util[0] - 0.995).abs() < 1e-6);
        assert_eq!(t.gpu_clock_events, vec![clock_event::SW_POWER_CAP, 0]);
        assert!(!t.temps_were_margins);
    }

    #[test]
    fn round_trip_absolute() {
        for n in [0, 1, 4, 72] {
            let t = sample(n);
            let bytes = encode_rack_telemetry(&t, TempReport::Absolute, 89.0);
            let text = std::str::from_utf8(&bytes).unwrap();
            assert!(text.contains("\"gpu_temp_c\"") && !text.contains("margin"), "{text}");
            let back = parse_rack_telemetry(&bytes, n, 0.0).unwrap();
            assert_eq!(back.ts_unix_ms, t.ts_unix_ms);
            assert_eq!(back.rack, t.rack);
            assert_eq!(back.seq, t.seq);
            assert_eq!(back.it_power_kw, t.it_power_kw);
            assert_eq!(back.inlet_temp_c, t.inlet_temp_c);
            assert_eq!(back.outlet_temp_c, t.outlet_temp_c);
            assert_eq!(back.gpu_power_w, t.gpu_power_w);
            assert_eq!(back.gpu_power_limit_w, t.gpu_power_limit_w);
            assert_eq!(back.gpu_temp_c, t.gpu_temp_c);
            assert_eq!(back.gpu_clock_events, t.gpu_clock_events);
            for (a, b) in back.gpu_util.iter().zip(&t.gpu_util) {
                assert!((a - b).abs() < 1e-6, "{a} vs {b}");
            }
            assert!(!back.temps_were_margins);
            assert_eq!(
                parse_rack_telemetry_with_stats(&bytes, n, 0.0).unwrap().1,
                ParseStats::default()
            );
        }
    }

    #[test]
    fn round_trip_margins_back_to_absolute() {
        let t = sample(72);
        let bytes = encode_rack_telemetry(&t, TempReport::Margin, 87.5);
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.contains("\"gpu_temp_margin_c\"") && text.contains("\"gpu_slowdown_c\":87.5"));
        assert!(!text.contains("\"gpu_temp_c\""));
        // The payload's own slowdown limit wins over the site's.
        let back = parse_rack_telemetry(&bytes, 72, 120.0).unwrap();
        assert!(back.temps_were_margins);
        for (a, b) in back.gpu_temp_c.iter().zip(&t.gpu_temp_c) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }

    #[test]
    fn margins_without_slowdown_use_site_limit() {
        let p = payload_with("gpu_temp_c", None);
        let mut text = String::from_utf8(p).unwrap();
        text.pop();
        text.push_str(r#", "gpu_temp_margin_c": [10, 30.5]}"#);
        let t = parse_rack_telemetry(text.as_bytes(), 2, 89.0).unwrap();
        assert!(t.temps_were_margins);
        assert_eq!(t.gpu_temp_c, vec![79.0, 58.5]);
        // A bad site limit is reported when it is needed.
        let e = parse_rack_telemetry(text.as_bytes(), 2, f32::NAN).unwrap_err();
        assert_err(&e, "range", "slowdown_c");
        // Margin that would put the die below −40 °C.
        let text = text.replace("[10, 30.5]", "[10, 130]");
        assert_err(&err(text.as_bytes()), "range", "`gpu_temp_margin_c[1]` = 130");
    }

    #[test]
    fn unknown_clock_events_and_fields_tolerated() {
        let p = payload_with(
            "gpu_clock_events",
            Some(r#"[["HW_SLOWDOWN", "SW_THERMAL", "HW_POWER_BRAKE"], ["GPU_IDLE", "HW_THERMAL", "SW_POWER_CAP"]]"#),
        );
        let mut text = String::from_utf8(p).unwrap();
        text.pop();
        text.push_str(r#", "agent_version": {"major": 2, "tags": [null, 1.5]}, "gpu_mem_temp_c": [1, 2]}"#);
        let (t, stats) = parse_rack_telemetry_with_stats(text.as_bytes(), 2, 89.0).unwrap();
        assert_eq!(
            t.gpu_clock_events,
            vec![
                clock_event::HW_SLOWDOWN | clock_event::SW_THERMAL,
                clock_event::HW_THERMAL | clock_event::SW_POWER_CAP
            ]
        );
        assert_eq!(stats.unknown_clock_event_names, 2);
    }

    #[test]
    fn escaped_strings_are_accepted() {
        let p = payload_with("rack", Some(r#""hall-a-r\u0030\u00301""#));
        assert_eq!(parse_rack_telemetry(&p, 2, 89.0).unwrap().rack, "hall-a-r001");
        let p = payload_with("gpu_clock_events", Some(r#"[["SW_POWER\u005fCAP"], []]"#));
        assert_eq!(
            parse_rack_telemetry(&p, 2, 89.0).unwrap().gpu_clock_events[0],
            clock_event::SW_POWER_CAP
        );
    }

    #[test]
    fn size_utf8_and_json_errors() {
        let huge = vec![b' '; MAX_PAYLOAD_BYTES + 1];
        assert_eq!(
            err(&huge),
            TelemetryError::TooLarge {
                len: MAX_PAYLOAD_BYTES + 1,
                max: MAX_PAYLOAD_BYTES
            }
        );
        assert_eq!(err(&huge).reason(), "too_large");
        assert_eq!(err(b"").reason(), "empty");
        assert_eq!(
            err(&[0xff, 0xfe, 0x00, 0x42]),
            TelemetryError::NotUtf8 { valid_up_to: 0 }
        );
        assert_eq!(err(b"{\"rack\": \"\xc3\x28\"}").reason(), "utf8");
        for garbage in [
            &b"hello"[..],
            b"   ",
            b"{",
            b"}",
            b"{\"x\" 1}",
            b"{\"x\": 1,}",
            b"\x01\x02",
        ] {
            assert_eq!(err(garbage).reason(), "json", "{:?}", String::from_utf8_lossy(garbage));
        }
        let e = err(b"[1, 2, 3]");
        assert_err(&e, "json", "sequence");
        assert_eq!(err(b"null").reason(), "json");
        assert_eq!(err(b"42").reason(), "json");
        // Truncated: the error says where and in which field.
        let full = payload_with("", None);
        let cut = &full[..full.len() - 10];
        let e = err(cut);
        assert_eq!(e.reason(), "json");
        assert!(e.to_string().contains("line 1 column"), "{e}");
        assert_eq!(e.field(), Some("gpu_clock_events"), "{e}");
        // Trailing data after the object.
        let mut trailing = full.clone();
        trailing.extend_from_slice(b" {}");
        assert_err(&err(&trailing), "json", "trailing");
        // A number too large for JSON's f64.
        assert_err(&err(&payload_with("it_power_kw", Some("1e999"))), "json", "it_power_kw");
        // Deep nesting in an ignored field is bounded by serde_json's recursion limit.
        let mut deep = String::from(r#"{"x": "#);
        deep.push_str(&"[".repeat(10_000));
        assert_eq!(err(deep.as_bytes()).reason(), "json");
    }

    #[test]
    fn missing_duplicate_and_type_errors() {
        for field in [
            "ts",
            "rack",
            "seq",
            "it_power_kw",
            "inlet_temp_c",
            "outlet_temp_c",
            "gpu_power_w",
            "gpu_util_pct",
            "gpu_power_limit_w",
            "gpu_clock_events",
        ] {
            let e = err(&payload_with(field, None));
            assert_eq!(e, TelemetryError::MissingField { field });
            assert_err(&e, "missing", field);
        }
        let mut dup = String::from_utf8(payload_with("", None)).unwrap();
        dup.pop();
        dup.push_str(r#", "seq": 8}"#);
        assert_err(&err(dup.as_bytes()), "duplicate", "seq");

        let cases = [
            ("gpu_power_w", r#"[700, "NaN"]"#),
            ("gpu_power_w", r#""NaN""#),
            ("gpu_util_pct", "[1, null]"),
            ("it_power_kw", r#""118.4""#),
            ("seq", "-1"),
            ("seq", "1.5"),
            ("ts", "1795986600000"),
            ("rack", "42"),
            ("gpu_clock_events", r#"["SW_POWER_CAP", []]"#),
            ("gpu_clock_events", "[[1], []]"),
            ("gpu_temp_c", "{}"),
            ("gpu_slowdown_c", r#""89""#),
        ];
        for (field, value) in cases {
            let e = err(&payload_with(field, Some(value)));
            assert_err(&e, "type", field);
            assert!(e.to_string().contains("line 1 column"), "{e}");
        }
        // `null` for the optional slowdown limit means absent.
        assert!(parse_rack_telemetry(&payload_with("gpu_slowdown_c", Some("null")), 2, 89.0).is_ok());
    }

    #[test]
    fn length_errors_name_the_array() {
        let e = err(&payload_with("gpu_util_pct", Some("[1, 2, 3]")));
        assert_eq!(
            e,
            TelemetryError::Length {
                field: "gpu_util_pct",
                got: 3,
                expected: 2
            }
        );
        assert_err(&e, "length", "gpu_util_pct");
        assert!(e.to_string().contains("3 entries, expected 2"), "{e}");
        for (field, value) in [
            ("gpu_power_w", "[]"),
            ("gpu_power_limit_w", "[1]"),
            ("gpu_temp_c", "[1, 2, 3, 4]"),
            ("gpu_clock_events", "[[]]"),
        ] {
            assert_err(&err(&payload_with(field, Some(value))), "length", field);
        }
        // The whole message for a rack the site file sizes differently.
        let bytes = encode_rack_telemetry(&sample(72), TempReport::Absolute, 89.0);
        assert_err(
            &parse_rack_telemetry(&bytes, 4, 89.0).unwrap_err(),
            "length",
            "gpu_power_w",
        );
    }

    #[test]
    fn temperature_field_choice() {
        let both = {
            let mut t = String::from_utf8(payload_with("", None)).unwrap();
            t.pop();
            t.push_str(r#", "gpu_temp_margin_c": [1, 2]}"#);
            t
        };
        let e = err(both.as_bytes());
        assert_eq!(e, TelemetryError::TemperatureFields { both: true });
        assert_err(&e, "temp_fields", "gpu_temp_margin_c");
        let e = err(&payload_with("gpu_temp_c", None));
        assert_eq!(e, TelemetryError::TemperatureFields { both: false });
        assert!(e.to_string().contains("neither"), "{e}");
    }

    #[test]
    fn range_errors_name_field_index_and_value() {
        let e = err(&payload_with("gpu_power_w", Some("[700, -1]")));
        assert_err(&e, "range", "`gpu_power_w[1]` = -1");
        assert_err(
            &err(&payload_with("gpu_power_w", Some("[5000.5, 1]"))),
            "range",
            "gpu_power_w[0]",
        );
        // Overflows f32: infinite.
        assert_err(
            &err(&payload_with("gpu_power_w", Some("[1e39, 1]"))),
            "range",
            "`gpu_power_w[0]` = inf",
        );
        assert_err(
            &err(&payload_with("gpu_util_pct", Some("[100.5, 1]"))),
            "range",
            "gpu_util_pct[0]",
        );
        assert_err(
            &err(&payload_with("gpu_util_pct", Some("[1, -0.1]"))),
            "range",
            "gpu_util_pct[1]",
        );
        assert_err(
            &err(&payload_with("gpu_power_limit_w", Some("[1, 9000]"))),
            "range",
            "gpu_power_limit_w[1]",
        );
        assert_err(
            &err(&payload_with("gpu_temp_c", Some("[150.5, 1]"))),
            "range",
            "`gpu_temp_c[0]` = 150.5",
        );
        assert_err(
            &err(&payload_with("gpu_temp_c", Some("[1, -41]"))),
            "range",
            "gpu_temp_c[1]",
        );
        assert_err(
            &err(&payload_with("inlet_temp_c", Some("-60"))),
            "range",
            "`inlet_temp_c` = -60",
        );
        assert_err(
            &err(&payload_with("outlet_temp_c", Some("200"))),
            "range",
            "outlet_temp_c",
        );
        assert_err(&err(&payload_with("it_power_kw", Some("-3"))), "range", "it_power_kw");
        assert_err(
            &err(&payload_with("gpu_slowdown_c", Some("400"))),
            "range",
            "gpu_slowdown_c",
        );
        // Bounds themselves are accepted.
        let ok = payload_with("gpu_temp_c", Some("[-40, 150]"));
        assert!(parse_rack_telemetry(&ok, 2, 89.0).is_ok());
    }

    #[test]
    fn timestamp_and_name_errors() {
        let e = err(&payload_with("ts", Some(r#""2026-11-29 21:10:00Z""#)));
        assert_err(&e, "timestamp", "ts");
        assert_err(
            &err(&payload_with("ts", Some(r#""yesterday""#))),
            "timestamp",
            "yesterday",
        );
        assert_err(&err(&payload_with("rack", Some(r#""""#))), "name", "rack");
        assert_err(&err(&payload_with("rack", Some(r#""hall-a/r001""#))), "name", "rack");
        assert_err(&err(&payload_with("rack", Some(r#""+""#))), "name", "rack");
        // Long strings are shortened in messages.
        let long = format!("\"{}\"", "x".repeat(10_000));
        assert!(err(&payload_with("ts", Some(&long))).to_string().len() < 400);
    }

    #[test]
    fn reasons_are_distinct() {
        let all = [
            TelemetryError::TooLarge { len: 0, max: 0 },
            TelemetryError::Empty,
            TelemetryError::NotUtf8 { valid_up_to: 0 },
            TelemetryError::Json {
                line: 0,
                column: 0,
                field: None,
                detail: String::new(),
            },
            TelemetryError::MissingField { field: "" },
            TelemetryError::DuplicateField { field: "" },
            TelemetryError::WrongType {
                field: "",
                detail: String::new(),
            },
            TelemetryError::Length {
                field: "",
                got: 0,
                expected: 0,
            },
            TelemetryError::TemperatureFields { both: false },
            TelemetryError::Range {
                field: "",
                index: None,
                value: 0.0,
                min: 0.0,
                max: 0.0,
            },
            TelemetryError::Timestamp {
                field: "",
                value: String::new(),
                why: "",
            },
            TelemetryError::InvalidName {
                field: "",
                value: String::new(),
            },
        ];
        let mut reasons: Vec<_> = all.iter().map(TelemetryError::reason).collect();
        reasons.sort_unstable();
        reasons.dedup();
        assert_eq!(reasons.len(), all.len());
    }

    #[test]
    fn power_limit_round_trip_and_errors() {
        let cmd = PowerLimitCommand {
            request_id: "req-42".into(),
            limits_w: vec![700.0, 650.5, 1_000.0],
            ts_unix_ms: 1_795_986_600_250,
        };
        let bytes = encode_power_limit_command(&cmd);
        assert_eq!(parse_power_limit_command(&bytes, 3).unwrap(), cmd);
        let res = PowerLimitResult {
            request_id: "req-42".into(),
            applied_w: vec![700.0, 650.5, 800.0],
            ts_unix_ms: 1_795_986_601_000,
        };
        let bytes = encode_power_limit_result(&res);
        assert_eq!(parse_power_limit_result(&bytes, 3).unwrap(), res);

        // A result is not a command and vice versa: the other array is an unknown field.
        assert_err(
            &parse_power_limit_command(&bytes, 3).unwrap_err(),
            "missing",
            "limits_w",
        );
        let cmd_bytes = encode_power_limit_command(&cmd);
        assert_err(
            &parse_power_limit_result(&cmd_bytes, 3).unwrap_err(),
            "missing",
            "applied_w",
        );

        assert_err(
            &parse_power_limit_command(&cmd_bytes, 4).unwrap_err(),
            "length",
            "limits_w",
        );
        let p = br#"{"ts": "2026-11-29T21:10:00Z", "request_id": "r1", "limits_w": [700, -5]}"#;
        assert_err(
            &parse_power_limit_command(p, 2).unwrap_err(),
            "range",
            "`limits_w[1]` = -5",
        );
        let p = br#"{"ts": "2026-11-29T21:10:00Z", "request_id": "r/1", "limits_w": [700, 5]}"#;
        assert_err(&parse_power_limit_command(p, 2).unwrap_err(), "name", "request_id");
        let p = br#"{"ts": "2026-11-29T21:10:00Z", "limits_w": [700, 5]}"#;
        assert_err(&parse_power_limit_command(p, 2).unwrap_err(), "missing", "request_id");
        let p = br#"{"ts": "2026-11-29T21:10:00Z", "request_id": "r1", "applied_w": ["max", 5]}"#;
        assert_err(&parse_power_limit_result(p, 2).unwrap_err(), "type", "applied_w");
        let p = br#"{"ts": "2026-13-29T21:10:00Z", "request_id": "r1", "applied_w": [1, 5]}"#;
        assert_err(&parse_power_limit_result(p, 2).unwrap_err(), "timestamp", "ts");
        assert_eq!(parse_power_limit_result(b"", 2).unwrap_err().reason(), "empty");
        assert_eq!(parse_power_limit_result(b"[]", 2).unwrap_err().reason(), "json");
    }

    #[test]
    fn topic_helpers() {
        let t = Topics::new("campus-1");
        assert_eq!(t.root, "coolplane/v1/campus-1");
        assert_eq!(t.rack_telemetry("r7"), "coolplane/v1/campus-1/rack/r7/telemetry");
        assert_eq!(t.rack_telemetry_filter(), "coolplane/v1/campus-1/rack/+/telemetry");
        assert_eq!(t.power_limit_set("r7"), "coolplane/v1/campus-1/rack/r7/power_limit/set");
        assert_eq!(
            t.power_limit_set_filter(),
            "coolplane/v1/campus-1/rack/+/power_limit/set"
        );
        assert_eq!(t.power_limit_result("r7"), "coolplane/v1/campus-1/rack/r7/power_limit");
        assert_eq!(
            t.power_limit_result_filter(),
            "coolplane/v1/campus-1/rack/+/power_limit"
        );
        assert_eq!(t.status(), "coolplane/v1/campus-1/status");
        assert_eq!(t.site_state(), "coolplane/v1/campus-1/site/state");
        assert_eq!(t.cdu_state("cdu-3"), "coolplane/v1/campus-1/cdu/cdu-3/state");
        assert_eq!(t.controller_mode(), "coolplane/v1/campus-1/controller/mode");
        assert_eq!(t.controller_plan(), "coolplane/v1/campus-1/controller/plan");
        assert_eq!(t.event("critical"), "coolplane/v1/campus-1/event/critical");
    }

    #[test]
    fn rack_of_good_and_bad_topics() {
        let t = Topics::new("campus-1");
        assert_eq!(t.rack_of(&t.rack_telemetry("hall-a-r001")), Some("hall-a-r001"));
        assert_eq!(t.rack_of(&t.power_limit_set("r2")), Some("r2"));
        assert_eq!(t.rack_of(&t.power_limit_result("r3")), Some("r3"));
        assert_eq!(
            t.rack_topic(&t.power_limit_set("r2")),
            Some(("r2", RackTopic::PowerLimitSet))
        );
        assert_eq!(
            t.rack_topic(&t.power_limit_result("r2")),
            Some(("r2", RackTopic::PowerLimitResult))
        );
        assert_eq!(
            t.rack_topic(&t.rack_telemetry("r2")),
            Some(("r2", RackTopic::Telemetry))
        );
        let bad = [
            t.rack_telemetry_filter(),
            t.power_limit_set_filter(),
            t.power_limit_result_filter(),
            "coolplane/v1/campus-1/rack/#".to_string(),
            "coolplane/v1/campus-1/rack/r#/telemetry".to_string(),
            "coolplane/v1/campus-1/rack//telemetry".to_string(),
            "coolplane/v1/campus-1/rack/a/b/telemetry".to_string(),
            "coolplane/v1/campus-1/rack/r1/telemetry/extra".to_string(),
            "coolplane/v1/campus-1/rack/r1/telemetry/".to_string(),
            "coolplane/v1/campus-1/rack/r1/power_limit/set/x".to_string(),
            "coolplane/v1/campus-1/rack/r1/state".to_string(),
            "coolplane/v1/campus-1/rack/r1".to_string(),
            "coolplane/v1/campus-1/rack/".to_string(),
            "coolplane/v1/campus-10/rack/r1/telemetry".to_string(),
            "coolplane/v1/other/rack/r1/telemetry".to_string(),
            "/coolplane/v1/campus-1/rack/r1/telemetry".to_string(),
            "coolplane/v1/campus-1/cdu/r1/telemetry".to_string(),
            t.status(),
            String::new(),
        ];
        for topic in bad {
            assert_eq!(t.rack_of(&topic), None, "{topic}");
        }
        assert!(is_valid_level("hall-a-r001"));
        for name in ["", "a/b", "+", "a#", "a\0"] {
            assert!(!is_valid_level(name), "{name:?}");
        }
    }

    #[test]
    fn rfc3339_known_values() {
        let ok = [
            ("1970-01-01T00:00:00Z", 0),
            ("1970-01-01T00:00:00.000Z", 0),
            ("2000-02-29T12:34:56.789Z", 951_827_696_789),
            ("2026-11-29T21:10:00+01:00", 1_795_983_000_000),
            ("2026-11-29T20:10:00Z", 1_795_983_000_000),
            ("2026-11-29T15:40:00-04:30", 1_795_983_000_000),
            ("2026-11-29t20:10:00z", 1_795_983_000_000),
            ("2026-11-29T20:10:00-00:00", 1_795_983_000_000),
            ("1970-01-01T00:00:00.5Z", 500),
            ("1970-01-01T00:00:00.05Z", 50),
            ("1970-01-01T00:00:00.123456789Z", 123),
            ("1969-12-31T23:59:59.999Z", -1),
            ("1969-12-31T23:59:59Z", -1_000),
            ("2024-02-29T00:00:00Z", 1_709_164_800_000),
            ("0000-01-01T00:00:00Z", MIN_RFC3339_MS),
            ("9999-12-31T23:59:59.999Z", MAX_RFC3339_MS),
            // Leap seconds, only at 23:59 UTC.
            ("2016-12-31T23:59:60Z", 1_483_228_800_000),
            ("2017-01-01T00:59:60+01:00", 1_483_228_800_000),
        ];
        for (s, ms) in ok {
            assert_eq!(parse_rfc3339(s), Ok(ms), "{s}");
        }
    }

    #[test]
    fn rfc3339_rejects() {
        let bad = [
            "",
            "2026-02-30T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-00-10T00:00:00Z",
            "2026-13-10T00:00:00Z",
            "2026-01-00T00:00:00Z",
            "2026-11-29T24:00:00Z",
            "2026-11-29T23:60:00Z",
            "2026-11-29T23:59:61Z",
            "2026-11-29T12:00:60Z",
            "2026-11-29 21:10:00Z",
            "2026-11-2921:10:00Z",
            "2026-11-29T21:10:00",
            "2026-11-29T21:10Z",
            "2026-11-29T21:10:00.Z",
            "2026-11-29T21:10:00+0100",
            "2026-11-29T21:10:00+01",
            "2026-11-29T21:10:00+24:00",
            "2026-11-29T21:10:00+01:60",
            "2026-11-29T21:10:00ZZ",
            "2026-11-29T21:10:00Z ",
            " 2026-11-29T21:10:00Z",
            "26-11-29T21:10:00Z",
            "+2026-11-29T21:10:00Z",
            "2026-1-29T21:10:00Z",
            "2026-11-29T21:10:00,5Z",
            "2026-11-29T21:1０:00Z",
            "2026-11-29T21:10:00.1a2Z",
            "1795983000000",
        ];
        for s in bad {
            let e = parse_rfc3339(s).unwrap_err();
            assert_eq!(e.reason(), "timestamp", "{s}");
            assert_eq!(e.field(), Some("ts"));
        }
    }

    #[test]
    fn rfc3339_format_and_round_trip() {
        assert_eq!(format_rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339_ms(951_827_696_789), "2000-02-29T12:34:56.789Z");
        assert_eq!(format_rfc3339_ms(1_795_983_000_000), "2026-11-29T20:10:00.000Z");
        assert_eq!(format_rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_rfc3339_ms(i64::MIN), "0000-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339_ms(i64::MAX), "9999-12-31T23:59:59.999Z");
        // Every day boundary over ±3 centuries plus odd offsets, and the calendar helpers agree.
        let mut ms = -10_000 * MS_PER_DAY * 11;
        while ms < 10_000 * MS_PER_DAY * 11 {
            for delta in [0, 1, 999, 43_200_123, MS_PER_DAY - 1] {
                let s = format_rfc3339_ms(ms + delta);
                assert_eq!(parse_rfc3339(&s), Ok(ms + delta), "{s}");
            }
            let (y, m, d) = civil_from_days(ms / MS_PER_DAY);
            assert_eq!(days_from_civil(y, m, d), ms / MS_PER_DAY);
            ms += MS_PER_DAY;
        }
    }
}
