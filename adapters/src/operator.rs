//! MQTT wire format for operators: retained state, Home Assistant discovery, commands and their
//! results.
//!
//! Pure code (no IO, no clock). Layout under the root `coolplane/v1/{site}`:
//!
//! | topic                                            | payload |
//! |--------------------------------------------------|---------|
//! | `…/site/state`, `…/hall/{hall}/state`, `…/cdu/{cdu}/state`, `…/rack/{rack}/state` | JSON state, retained |
//! | `…/domain/{id}/budget`                           | JSON limit, load, headroom, retained |
//! | `…/controller/mode`                              | `auto` / `manual` / `safe`, retained |
//! | `…/cdu/{cdu}/availability`                       | `online` / `offline`, retained |
//! | `…/event/{severity}`                             | JSON event, not retained |
//! | `…/controller/mode/set`                          | `{"request_id", "mode", "ttl_s"}` |
//! | `…/cdu/{cdu}/supply_temp_setpoint_c/set`         | `{"request_id", "supply_temp_setpoint_c", "ttl_s"}` |
//! | `…/cdu/{cdu}/flow_setpoint_lpm/set`              | `{"request_id", "flow_setpoint_lpm", "ttl_s"}` |
//! | `…/hall/{hall}/facility_supply_temp_setpoint_c/set` | `{"request_id", "facility_supply_temp_setpoint_c", "ttl_s"}` |
//! | `…/domain/{id}/limit/set`                        | `{"request_id", "limit_kw", "ttl_s", "reason"?}` |
//! | `…/cmd_result/{request_id}`                      | [`CommandResult`] |
//! | `homeassistant/device/{id}/config`               | Home Assistant device discovery, retained |
//!
//! Every command is a lease: `ttl_s` is required, and when it lapses the target reverts to what
//! the controller would do without it. `{"request_id", "release": true}` on the same topic ends
//! the lease early. Parsing never panics; every error names the field.

use crate::telemetry::{is_valid_level, Topics};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// Home Assistant's discovery prefix (its default).
pub const HA_PREFIX: &str = "homeassistant";
/// Topic on which Home Assistant announces `online` / `offline` (its birth and last will).
pub const HA_STATUS_TOPIC: &str = "homeassistant/status";
/// Longest request id, bytes.
pub const REQUEST_ID_MAX: usize = 64;

/// Topics of the operator layer (built on [`Topics`]).
pub trait OperatorTopics {
    /// `…/hall/{hall}/state`.
    fn hall_state(&self, hall: &str) -> String;
    /// `…/rack/{rack}/state`.
    fn rack_state(&self, rack: &str) -> String;
    /// `…/cdu/{cdu}/availability`.
    fn cdu_availability(&self, cdu: &str) -> String;
    /// `…/domain/{id}/budget`.
    fn domain_budget(&self, domain: &str) -> String;
    /// `…/cmd_result/{request_id}`.
    fn cmd_result(&self, request_id: &str) -> String;
    /// Subscription filters of every command topic.
    fn command_filters(&self) -> Vec<String>;
}

impl OperatorTopics for Topics {
    fn hall_state(&self, hall: &str) -> String {
        format!("{}/hall/{hall}/state", self.root)
    }
    fn rack_state(&self, rack: &str) -> String {
        format!("{}/rack/{rack}/state", self.root)
    }
    fn cdu_availability(&self, cdu: &str) -> String {
        format!("{}/cdu/{cdu}/availability", self.root)
    }
    fn domain_budget(&self, domain: &str) -> String {
        format!("{}/domain/{domain}/budget", self.root)
    }
    fn cmd_result(&self, request_id: &str) -> String {
        format!("{}/cmd_result/{request_id}", self.root)
    }
    fn command_filters(&self) -> Vec<String> {
        vec![
            format!("{}/controller/mode/set", self.root),
            format!("{}/cdu/+/+/set", self.root),
            format!("{}/hall/+/+/set", self.root),
            format!("{}/domain/+/limit/set", self.root),
        ]
    }
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// Operating mode an operator may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OperatorMode {
    /// The policy proposes, the safety envelope narrows.
    Auto,
    /// Hold the setpoints commanded now.
    Manual,
    /// Design setpoints everywhere.
    Safe,
}

impl OperatorMode {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            OperatorMode::Auto => "auto",
            OperatorMode::Manual => "manual",
            OperatorMode::Safe => "safe",
        }
    }
}

/// What a command asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandTarget {
    /// `…/controller/mode/set`.
    Mode,
    /// `…/cdu/{cdu}/supply_temp_setpoint_c/set`.
    CduSupply(String),
    /// `…/cdu/{cdu}/flow_setpoint_lpm/set`.
    CduFlow(String),
    /// `…/hall/{hall}/facility_supply_temp_setpoint_c/set`.
    FacilitySupply(String),
    /// `…/domain/{id}/limit/set`.
    DomainLimit(String),
}

impl CommandTarget {
    /// The payload field carrying the value.
    pub fn value_field(&self) -> &'static str {
        match self {
            CommandTarget::Mode => "mode",
            CommandTarget::CduSupply(_) => "supply_temp_setpoint_c",
            CommandTarget::CduFlow(_) => "flow_setpoint_lpm",
            CommandTarget::FacilitySupply(_) => "facility_supply_temp_setpoint_c",
            CommandTarget::DomainLimit(_) => "limit_kw",
        }
    }

    /// A stable key naming the target (one lease per key): `mode`, `cdu/hall-a-cdu-01/flow_setpoint_lpm`.
    pub fn key(&self) -> String {
        match self {
            CommandTarget::Mode => "mode".into(),
            CommandTarget::CduSupply(c) | CommandTarget::CduFlow(c) => format!("cdu/{c}/{}", self.value_field()),
            CommandTarget::FacilitySupply(h) => format!("hall/{h}/{}", self.value_field()),
            CommandTarget::DomainLimit(d) => format!("domain/{d}/limit"),
        }
    }
}

/// The value a command sets.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandValue {
    /// A mode.
    Mode(OperatorMode),
    /// A number in the unit of [`CommandTarget::value_field`].
    Number(f64),
    /// End the lease now.
    Release,
}

/// A parsed, well-formed command (not yet authorised against the plant's limits).
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Request id (also the result topic's last level).
    pub request_id: String,
    /// What it sets.
    pub target: CommandTarget,
    /// The value.
    pub value: CommandValue,
    /// Lease time-to-live, s (0 for a release).
    pub ttl_s: f64,
    /// Why, for the log.
    pub reason: Option<String>,
}

/// A command that could not be parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandError {
    /// Request id when one could be read (then a result is published), else `None`.
    pub request_id: Option<String>,
    /// The offending field (`topic` for a topic that names no command).
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// Which command a topic is, if any (`None`: not a command topic of this site).
pub fn command_target(topics: &Topics, topic: &str) -> Option<CommandTarget> {
    let rest = topic
        .strip_prefix(&topics.root)?
        .strip_prefix('/')?
        .strip_suffix("/set")?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        ["controller", "mode"] => Some(CommandTarget::Mode),
        ["cdu", c, "supply_temp_setpoint_c"] => Some(CommandTarget::CduSupply(c.to_string())),
        ["cdu", c, "flow_setpoint_lpm"] => Some(CommandTarget::CduFlow(c.to_string())),
        ["hall", h, "facility_supply_temp_setpoint_c"] => Some(CommandTarget::FacilitySupply(h.to_string())),
        ["domain", d, "limit"] => Some(CommandTarget::DomainLimit(d.to_string())),
        _ => None,
    }
}

fn err(request_id: &Option<String>, field: &'static str, reason: impl Into<String>) -> CommandError {
    CommandError {
        request_id: request_id.clone(),
        field,
        reason: reason.into(),
    }
}

/// Parse a command published on `topic`. `max_ttl_s` bounds the lease.
pub fn parse_command(topics: &Topics, topic: &str, payload: &[u8], max_ttl_s: f64) -> Result<Command, CommandError> {
    let none = None;
    let target = command_target(topics, topic).ok_or_else(|| err(&none, "topic", format!("{topic}: not a command")))?;
    if payload.len() > 4096 {
        return Err(err(&none, "payload", format!("{} bytes, at most 4096", payload.len())));
    }
    let v: Value = serde_json::from_slice(payload).map_err(|e| err(&none, "payload", format!("not JSON: {e}")))?;
    let Value::Object(obj) = v else {
        return Err(err(&none, "payload", "not a JSON object"));
    };
    let request_id = match obj.get("request_id") {
        Some(Value::String(s)) if s.len() <= REQUEST_ID_MAX && is_valid_level(s) && s.is_ascii() => Some(s.clone()),
        Some(_) => {
            return Err(err(
                &none,
                "request_id",
                format!("must be 1–{REQUEST_ID_MAX} ASCII characters without / + #"),
            ))
        }
        None => return Err(err(&none, "request_id", "missing")),
    };
    let rid = &request_id;
    let reason = match obj.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.len() <= 200 => Some(s.clone()),
        Some(_) => return Err(err(rid, "reason", "must be a string of at most 200 bytes")),
    };
    let field = target.value_field();
    for k in obj.keys() {
        if !matches!(k.as_str(), "request_id" | "ttl_s" | "release" | "reason") && k != field {
            return Err(err(
                rid,
                "payload",
                format!("unknown field `{k}` (this topic takes `{field}`)"),
            ));
        }
    }
    if obj.get("release") == Some(&Value::Bool(true)) {
        if obj.contains_key(field) {
            return Err(err(rid, "release", format!("a release carries no `{field}`")));
        }
        return Ok(Command {
            request_id: request_id.unwrap_or_default(),
            target,
            value: CommandValue::Release,
            ttl_s: 0.0,
            reason,
        });
    }
    let value = match (&target, obj.get(field)) {
        (_, None) => return Err(err(rid, field, "missing")),
        (CommandTarget::Mode, Some(Value::String(s))) => CommandValue::Mode(match s.as_str() {
            "auto" => OperatorMode::Auto,
            "manual" => OperatorMode::Manual,
            "safe" => OperatorMode::Safe,
            _ => return Err(err(rid, "mode", format!("{s:?}: one of auto, manual, safe"))),
        }),
        (CommandTarget::Mode, Some(_)) => return Err(err(rid, "mode", "must be a string")),
        (_, Some(Value::Number(n))) => match n.as_f64() {
            Some(x) if x.is_finite() => CommandValue::Number(x),
            _ => return Err(err(rid, field, "not a finite number")),
        },
        (_, Some(_)) => return Err(err(rid, field, "must be a number")),
    };
    let ttl_s = match obj.get("ttl_s").and_then(Value::as_f64) {
        Some(t) if t.is_finite() && t >= 1.0 && t <= max_ttl_s => t,
        Some(t) => return Err(err(rid, "ttl_s", format!("{t}: must be within [1, {max_ttl_s}] s"))),
        None => {
            return Err(err(
                rid,
                "ttl_s",
                "missing (every command is a lease with a time-to-live)",
            ))
        }
    };
    Ok(Command {
        request_id: request_id.unwrap_or_default(),
        target,
        value,
        ttl_s,
        reason,
    })
}

/// Outcome of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResultStatus {
    /// Accepted: the lease is in force.
    Accepted,
    /// Refused (malformed, out of the equipment's range, rate-limited, unknown target).
    Rejected,
    /// The lease lapsed: the target reverted.
    Expired,
    /// Released early by the operator.
    Released,
    /// Replaced by a later command on the same target.
    Superseded,
}

/// The message on `…/cmd_result/{request_id}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandResult {
    /// Request id.
    pub request_id: String,
    /// Outcome.
    pub status: ResultStatus,
    /// The target's key ([`CommandTarget::key`]).
    pub target: String,
    /// The value in force (after the safety envelope's clamps), when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied: Option<Value>,
    /// When the lease lapses, RFC 3339 UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Explanation for the operator (why refused, what was clamped).
    pub detail: String,
    /// When, RFC 3339 UTC.
    pub ts: String,
}

impl CommandResult {
    /// JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
// Home Assistant device discovery
// ---------------------------------------------------------------------------------------------

/// One entity of a discovered device.
#[derive(Debug, Clone, PartialEq)]
pub struct HaEntity {
    /// Object id within the device (`pue`, `supply_temp_c`).
    pub key: String,
    /// Display name.
    pub name: String,
    /// Home Assistant platform: `sensor`, `binary_sensor`, `number`, `select`.
    pub platform: &'static str,
    /// JSON field of the state message this entity shows.
    pub field: String,
    /// State topic of this entity when it is not the device's.
    pub state_topic: Option<String>,
    /// `device_class` (`temperature`, `power`, `volume_flow_rate`, …), if any.
    pub device_class: Option<&'static str>,
    /// Unit of measurement, if any.
    pub unit: Option<&'static str>,
    /// Command topic, for `number` and `select`.
    pub command_topic: Option<String>,
    /// Range (`number`) and step.
    pub range: Option<(f64, f64, f64)>,
    /// Options (`select`).
    pub options: Vec<&'static str>,
}

impl HaEntity {
    /// A measurement sensor.
    pub fn sensor(key: &str, name: &str, device_class: Option<&'static str>, unit: Option<&'static str>) -> Self {
        Self {
            key: key.into(),
            name: name.into(),
            platform: "sensor",
            field: key.into(),
            state_topic: None,
            device_class,
            unit,
            command_topic: None,
            range: None,
            options: Vec::new(),
        }
    }
}

/// One Home Assistant device (a CDU, a rack row, a hall, the site) and its entities.
#[derive(Debug, Clone, PartialEq)]
pub struct HaDevice {
    /// Unique id (also the discovery topic's level): `coolplane_hall-10k_cdu_hall-a-cdu-01`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Model shown in Home Assistant.
    pub model: String,
    /// Retained JSON state topic the entities read.
    pub state_topic: String,
    /// Availability topics (`online`/`offline`), all of which must say `online`.
    pub availability: Vec<String>,
    /// Seconds after the last state message before Home Assistant shows the values unavailable.
    pub expire_after_s: u64,
    /// Entities.
    pub entities: Vec<HaEntity>,
}

impl HaDevice {
    /// `homeassistant/device/{id}/config`.
    pub fn config_topic(&self) -> String {
        format!("{HA_PREFIX}/device/{}/config", self.id)
    }

    /// The device discovery payload: `dev`, `o`, `cmps` (each component with its platform `p`),
    /// the shared `state_topic`, and an `availability` list; every sensor has `expire_after`,
    /// `state_class` measurement, its `device_class` and `unit_of_measurement`.
    pub fn config_payload(&self) -> Value {
        let mut cmps = Map::new();
        for e in &self.entities {
            let uid = format!("{}_{}", self.id, e.key);
            let mut c = Map::new();
            c.insert("p".into(), json!(e.platform));
            c.insert("name".into(), json!(e.name));
            c.insert("unique_id".into(), json!(uid));
            c.insert("object_id".into(), json!(uid));
            c.insert(
                "value_template".into(),
                json!(format!("{{{{ value_json.{} }}}}", e.field)),
            );
            if let Some(t) = &e.state_topic {
                c.insert("state_topic".into(), json!(t));
            }
            if let Some(dc) = e.device_class {
                c.insert("device_class".into(), json!(dc));
            }
            if let Some(u) = e.unit {
                c.insert("unit_of_measurement".into(), json!(u));
            }
            match e.platform {
                "sensor" => {
                    c.insert("state_class".into(), json!("measurement"));
                    c.insert("expire_after".into(), json!(self.expire_after_s));
                }
                "binary_sensor" => {
                    c.insert("payload_on".into(), json!(true));
                    c.insert("payload_off".into(), json!(false));
                    c.insert(
                        "value_template".into(),
                        json!(format!("{{{{ value_json.{} }}}}", e.field)),
                    );
                    c.insert("expire_after".into(), json!(self.expire_after_s));
                }
                _ => {}
            }
            if let Some(t) = &e.command_topic {
                c.insert("command_topic".into(), json!(t));
                // A command is a lease: Home Assistant's value is held for an hour, then reverts.
                c.insert(
                    "command_template".into(),
                    json!(format!(
                        "{{\"request_id\": \"ha-{{{{ now().timestamp() | int }}}}\", \"{}\": {}, \"ttl_s\": 3600}}",
                        e.field,
                        if e.platform == "select" {
                            "\"{{ value }}\""
                        } else {
                            "{{ value }}"
                        }
                    )),
                );
            }
            if let Some((min, max, step)) = e.range {
                c.insert("min".into(), json!(min));
                c.insert("max".into(), json!(max));
                c.insert("step".into(), json!(step));
                c.insert("mode".into(), json!("box"));
            }
            if !e.options.is_empty() {
                c.insert("options".into(), json!(e.options));
            }
            cmps.insert(uid, Value::Object(c));
        }
        json!({
            "dev": {
                "ids": [self.id],
                "name": self.name,
                "mf": "coolplane",
                "mdl": self.model,
                "sw": env!("CARGO_PKG_VERSION"),
            },
            "o": {
                "name": "coolplane",
                "sw": env!("CARGO_PKG_VERSION"),
            },
            "cmps": Value::Object(cmps),
            "state_topic": self.state_topic,
            "availability": self.availability.iter().map(|t| json!({
                "topic": t,
                "payload_available": "online",
                "payload_not_available": "offline",
            })).collect::<Vec<_>>(),
            "availability_mode": "all",
            "qos": 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Topics {
        Topics::new("hall-10k")
    }

    #[test]
    fn command_topics_are_recognised_and_others_are_not() {
        let t = t();
        assert_eq!(
            command_target(&t, "coolplane/v1/hall-10k/controller/mode/set"),
            Some(CommandTarget::Mode)
        );
        assert_eq!(
            command_target(&t, "coolplane/v1/hall-10k/cdu/hall-a-cdu-01/supply_temp_setpoint_c/set"),
            Some(CommandTarget::CduSupply("hall-a-cdu-01".into()))
        );
        assert_eq!(
            command_target(&t, "coolplane/v1/hall-10k/domain/hall-a/limit/set"),
            Some(CommandTarget::DomainLimit("hall-a".into()))
        );
        assert_eq!(command_target(&t, "coolplane/v1/hall-10k/cdu/x/pump_speed/set"), None);
        assert_eq!(command_target(&t, "coolplane/v1/other/controller/mode/set"), None);
        assert_eq!(command_target(&t, "coolplane/v1/hall-10k/controller/mode"), None);
        for f in t.command_filters() {
            assert!(f.starts_with("coolplane/v1/hall-10k/") && f.ends_with("/set"), "{f}");
        }
    }

    #[test]
    fn a_well_formed_command_parses_with_its_lease() {
        let t = t();
        let c = parse_command(
            &t,
            "coolplane/v1/hall-10k/cdu/hall-a-cdu-01/supply_temp_setpoint_c/set",
            br#"{"request_id":"op-1","supply_temp_setpoint_c":41.5,"ttl_s":600,"reason":"test"}"#,
            86_400.0,
        )
        .unwrap();
        assert_eq!(c.request_id, "op-1");
        assert_eq!(c.value, CommandValue::Number(41.5));
        assert_eq!(c.ttl_s, 600.0);
        assert_eq!(c.target.key(), "cdu/hall-a-cdu-01/supply_temp_setpoint_c");
        let m = parse_command(
            &t,
            "coolplane/v1/hall-10k/controller/mode/set",
            br#"{"request_id":"op-2","mode":"manual","ttl_s":60}"#,
            86_400.0,
        )
        .unwrap();
        assert_eq!(m.value, CommandValue::Mode(OperatorMode::Manual));
        let r = parse_command(
            &t,
            "coolplane/v1/hall-10k/controller/mode/set",
            br#"{"request_id":"op-3","release":true}"#,
            86_400.0,
        )
        .unwrap();
        assert_eq!(r.value, CommandValue::Release);
    }

    #[test]
    fn bad_commands_name_the_field() {
        let t = t();
        let topic = "coolplane/v1/hall-10k/cdu/hall-a-cdu-01/supply_temp_setpoint_c/set";
        let cases: &[(&[u8], Option<&str>, &str)] = &[
            (b"not json", None, "payload"),
            (br#"{"supply_temp_setpoint_c":40,"ttl_s":60}"#, None, "request_id"),
            (
                br#"{"request_id":"a/b","supply_temp_setpoint_c":40,"ttl_s":60}"#,
                None,
                "request_id",
            ),
            (br#"{"request_id":"x","ttl_s":60}"#, Some("x"), "supply_temp_setpoint_c"),
            (
                br#"{"request_id":"x","supply_temp_setpoint_c":"hot","ttl_s":60}"#,
                Some("x"),
                "supply_temp_setpoint_c",
            ),
            (br#"{"request_id":"x","supply_temp_setpoint_c":40}"#, Some("x"), "ttl_s"),
            (
                br#"{"request_id":"x","supply_temp_setpoint_c":40,"ttl_s":1e9}"#,
                Some("x"),
                "ttl_s",
            ),
            (
                br#"{"request_id":"x","flow_setpoint_lpm":40,"ttl_s":60}"#,
                Some("x"),
                "payload",
            ),
        ];
        for (p, rid, field) in cases {
            let e = parse_command(&t, topic, p, 86_400.0).unwrap_err();
            assert_eq!(e.field, *field, "{}: {e}", String::from_utf8_lossy(p));
            assert_eq!(e.request_id.as_deref(), *rid, "{}", String::from_utf8_lossy(p));
        }
        let e = parse_command(
            &t,
            "coolplane/v1/hall-10k/controller/mode/set",
            br#"{"request_id":"x","mode":"turbo","ttl_s":60}"#,
            86_400.0,
        )
        .unwrap_err();
        assert!(e.field == "mode" && e.reason.contains("turbo"), "{e}");
    }

    #[test]
    fn discovery_payload_is_a_home_assistant_device_message() {
        let mut e = HaEntity::sensor("supply_temp_c", "Supply temperature", Some("temperature"), Some("°C"));
        e.field = "supply_temp_c".into();
        let mut sp = HaEntity::sensor("sp", "Supply setpoint", Some("temperature"), Some("°C"));
        sp.platform = "number";
        sp.field = "supply_temp_setpoint_c".into();
        sp.command_topic = Some("coolplane/v1/s/cdu/c1/supply_temp_setpoint_c/set".into());
        sp.range = Some((30.0, 45.0, 0.1));
        let d = HaDevice {
            id: "coolplane_s_cdu_c1".into(),
            name: "CDU c1".into(),
            model: "CDU".into(),
            state_topic: "coolplane/v1/s/cdu/c1/state".into(),
            availability: vec![
                "coolplane/v1/s/status".into(),
                "coolplane/v1/s/cdu/c1/availability".into(),
            ],
            expire_after_s: 120,
            entities: vec![e, sp],
        };
        assert_eq!(d.config_topic(), "homeassistant/device/coolplane_s_cdu_c1/config");
        let p = d.config_payload();
        assert_eq!(p["dev"]["ids"][0], "coolplane_s_cdu_c1");
        assert_eq!(p["o"]["name"], "coolplane");
        assert_eq!(p["state_topic"], "coolplane/v1/s/cdu/c1/state");
        assert_eq!(p["availability"][1]["topic"], "coolplane/v1/s/cdu/c1/availability");
        let c = &p["cmps"]["coolplane_s_cdu_c1_supply_temp_c"];
        assert_eq!(c["p"], "sensor");
        assert_eq!(c["device_class"], "temperature");
        assert_eq!(c["state_class"], "measurement");
        assert_eq!(c["unit_of_measurement"], "°C");
        assert_eq!(c["expire_after"], 120);
        assert_eq!(c["value_template"], "{{ value_json.supply_temp_c }}");
        let n = &p["cmps"]["coolplane_s_cdu_c1_sp"];
        assert_eq!(n["p"], "number");
        assert_eq!(n["min"], 30.0);
        assert!(n.get("expire_after").is_none());
        // The command template renders to a command parse_command accepts.
        let tpl = n["command_template"].as_str().unwrap();
        let rendered = tpl
            .replace("{{ now().timestamp() | int }}", "1700000000")
            .replace("{{ value }}", "41.5");
        let cmd = parse_command(
            &Topics::new("s"),
            n["command_topic"].as_str().unwrap(),
            rendered.as_bytes(),
            86_400.0,
        )
        .unwrap();
        assert_eq!(cmd.value, CommandValue::Number(41.5));
        assert_eq!(cmd.ttl_s, 3600.0);
    }
}
