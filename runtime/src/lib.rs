//! # coolplane-runtime
//!
//! The production daemon: a thin async driver around the sans-IO controller. It reads a daemon
//! configuration (site, policy, tick, Modbus devices with their register maps, MQTT broker),
//! starts one adapter task per device and the MQTT link, and then, once per tick, assembles the
//! process image, runs the controller, and hands its actions to the adapters.
//!
//! The controller runs at its own fixed tick on the latest image: it never acts on single
//! messages. Everything the adapters could not read shows up as ageing or bad readings, which the
//! controller turns into safe setpoints.

pub mod caps;
pub mod history;
pub mod http;
pub mod metrics;
pub mod operator;
pub mod snapshot;
pub mod web;

use coolplane_adapters::clock::Clock;
use coolplane_adapters::image::WirePlant;
use coolplane_adapters::modbus::{spawn_device, DeviceConfig, DeviceStatus};
use coolplane_adapters::mqtt::{MqttConfig, MqttLink, MqttStats};
use coolplane_adapters::points::{check_map, Role as MapRole};
use coolplane_adapters::regmap::RegisterMap;
use coolplane_controller::{Controller, ControllerConfig, ControllerEvent, Mode};
use coolplane_core::site::{builtin_site, Site};
use coolplane_core::topology::Topology;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// Built-in register maps, by the name `builtin:NAME` in a daemon configuration.
pub fn builtin_map(name: &str) -> Option<&'static str> {
    match name {
        "coolplane-cdu" => Some(include_str!("../../maps/coolplane-cdu.toml")),
        "coolplane-facility" => Some(include_str!("../../maps/coolplane-facility.toml")),
        "coolplane-meter" => Some(include_str!("../../maps/coolplane-meter.toml")),
        "coolplane-2pic-tank" => Some(include_str!("../../maps/coolplane-2pic-tank.toml")),
        _ => None,
    }
}

/// The daemon could not start.
#[derive(Debug, Error)]
pub enum DaemonError {
    /// The configuration did not parse or is invalid; the message names the field.
    #[error("daemon configuration {file}: {message}")]
    Config {
        /// File.
        file: String,
        /// What is wrong.
        message: String,
    },
}

fn cfg_err(file: &str, message: impl Into<String>) -> DaemonError {
    DaemonError::Config {
        file: file.to_string(),
        message: message.into(),
    }
}

/// `[daemon]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonSection {
    /// Built-in site name or path to a site file (relative to the configuration file).
    pub site: String,
    /// Control policy.
    #[serde(default = "default_policy")]
    pub policy: String,
    /// Controller tick, s of plant time.
    #[serde(default = "default_tick")]
    pub tick_s: f64,
    /// Plant-time speed-up over real time (1 in production; the simulated plant may run faster).
    #[serde(default = "one")]
    pub speed: f64,
}

fn default_policy() -> String {
    "trim-respond".into()
}
fn default_tick() -> f64 {
    10.0
}
fn one() -> f64 {
    1.0
}

/// `[mqtt]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqttSection {
    /// Broker host.
    pub host: String,
    /// Broker port.
    #[serde(default = "default_mqtt_port")]
    pub port: u16,
    /// Client id.
    #[serde(default = "default_client_id")]
    pub client_id: String,
    /// Username on the broker (with `password_file`); absent: anonymous.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the password (first line; relative to the configuration file).
    #[serde(default)]
    pub password_file: Option<String>,
    /// PEM file of the CA that signed the broker's certificate: connect over TLS (rustls).
    #[serde(default)]
    pub ca_file: Option<String>,
    /// Listen for operator commands (`…/set` topics).
    #[serde(default = "yes")]
    pub accept_commands: bool,
    /// Accept commands over a link without credentials (anyone who reaches the broker could
    /// command setpoints): only for a loopback demo or a broker that authenticates otherwise.
    #[serde(default)]
    pub allow_unauthenticated_commands: bool,
    /// Longest command lease, s.
    #[serde(default = "default_max_ttl")]
    pub max_command_ttl_s: f64,
    /// Commands accepted per minute (all operators together).
    #[serde(default = "default_cmd_rate")]
    pub commands_per_min: usize,
    /// Publish Home Assistant MQTT discovery.
    #[serde(default = "yes")]
    pub discovery: bool,
}

impl MqttSection {
    /// An anonymous link to `host:port`, commands accepted only where the caller says so.
    pub fn new(host: &str, port: u16, client_id: &str) -> Self {
        Self {
            host: host.to_string(),
            port,
            client_id: client_id.to_string(),
            username: None,
            password_file: None,
            ca_file: None,
            accept_commands: true,
            allow_unauthenticated_commands: false,
            max_command_ttl_s: default_max_ttl(),
            commands_per_min: default_cmd_rate(),
            discovery: true,
        }
    }

    /// Refuse a configuration that would take commands from anyone.
    pub fn validate(&self) -> Result<(), String> {
        if self.username.is_some() != self.password_file.is_some() {
            return Err("mqtt.username and mqtt.password_file go together".into());
        }
        if self.accept_commands && self.username.is_none() && !self.allow_unauthenticated_commands {
            return Err(
                "mqtt: commands are accepted (mqtt.accept_commands = true) but the link has no credentials \
                 (mqtt.username / mqtt.password_file): anyone who reaches the broker could command setpoints. \
                 Give the daemon credentials on a broker whose ACL lets only operators publish `…/set` \
                 (see examples/mosquitto/), or set mqtt.accept_commands = false, or accept the risk with \
                 mqtt.allow_unauthenticated_commands = true"
                    .into(),
            );
        }
        if !(self.max_command_ttl_s.is_finite() && self.max_command_ttl_s >= 1.0) {
            return Err(format!(
                "mqtt.max_command_ttl_s = {}: must be at least 1 s",
                self.max_command_ttl_s
            ));
        }
        if self.commands_per_min == 0 {
            return Err("mqtt.commands_per_min = 0: must be at least 1".into());
        }
        Ok(())
    }
}

fn yes() -> bool {
    true
}
fn default_max_ttl() -> f64 {
    86_400.0
}
fn default_cmd_rate() -> usize {
    30
}

fn default_mqtt_port() -> u16 {
    1883
}
fn default_client_id() -> String {
    "coolplane".into()
}

/// Role of a Modbus device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceRole {
    /// A CDU.
    Cdu,
    /// A hall's facility water system.
    Facility,
    /// The site meter.
    Meter,
}

/// One `[[device]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSection {
    /// Role.
    pub role: DeviceRole,
    /// CDU or hall index in the site's topology (0 for the meter).
    #[serde(default)]
    pub index: usize,
    /// `host:port`.
    pub address: String,
    /// Modbus unit id.
    #[serde(default = "default_unit")]
    pub unit: u8,
    /// Register map: a path (relative to the configuration file) or `builtin:coolplane-cdu`.
    pub map: String,
    /// Poll period, s of plant time.
    #[serde(default = "default_poll")]
    pub poll_s: f64,
    /// Request timeout, ms (wall clock).
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// First reconnect back-off, ms (wall clock); doubles up to `backoff_max_ms`.
    #[serde(default = "default_backoff")]
    pub backoff_ms: u64,
    /// Longest reconnect back-off, ms.
    #[serde(default = "default_backoff_max")]
    pub backoff_max_ms: u64,
}

impl DeviceSection {
    /// A device on the built-in map of its role (`builtin:coolplane-cdu`, `-facility`, `-meter`),
    /// unit id 1, with loopback-sized timing: 500 ms timeout, back-off 200 ms doubling to 5 s.
    pub fn builtin(role: DeviceRole, index: usize, address: SocketAddr, poll_s: f64) -> Self {
        let map = match role {
            DeviceRole::Cdu => "builtin:coolplane-cdu",
            DeviceRole::Facility => "builtin:coolplane-facility",
            DeviceRole::Meter => "builtin:coolplane-meter",
        };
        Self {
            role,
            index,
            address: address.to_string(),
            unit: 1,
            map: map.to_string(),
            poll_s,
            timeout_ms: 500,
            backoff_ms: 200,
            backoff_max_ms: 5_000,
        }
    }
}

fn default_unit() -> u8 {
    1
}
fn default_poll() -> f64 {
    5.0
}
fn default_timeout() -> u64 {
    1000
}
fn default_backoff() -> u64 {
    2000
}
fn default_backoff_max() -> u64 {
    300_000
}

/// A daemon configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// Site, policy, tick.
    pub daemon: DaemonSection,
    /// Controller tuning.
    #[serde(default)]
    pub controller: ControllerConfig,
    /// Broker (absent: no rack telemetry).
    #[serde(default)]
    pub mqtt: Option<MqttSection>,
    /// Modbus devices.
    #[serde(default, rename = "device")]
    pub devices: Vec<DeviceSection>,
    /// The power-budget API for job schedulers (absent: not served).
    #[serde(default)]
    pub api: Option<http::ApiConfig>,
    /// History to a time-series database (absent: none).
    #[serde(default)]
    pub history: Option<history::HistoryConfig>,
    /// The live web page and `/metrics` (absent: not served).
    #[serde(default)]
    pub web: Option<web::WebConfig>,
}

impl DaemonConfig {
    /// Parse a configuration file's text.
    pub fn from_toml_str(file: &str, text: &str) -> Result<Self, DaemonError> {
        let c: DaemonConfig = toml::from_str(text).map_err(|e| cfg_err(file, e.to_string()))?;
        if !(c.daemon.tick_s.is_finite() && c.daemon.tick_s >= 0.1 && c.daemon.tick_s <= 600.0) {
            return Err(cfg_err(
                file,
                format!("daemon.tick_s = {}: must be within [0.1, 600] s", c.daemon.tick_s),
            ));
        }
        if !(c.daemon.speed.is_finite() && c.daemon.speed > 0.0 && c.daemon.speed <= 100_000.0) {
            return Err(cfg_err(
                file,
                format!("daemon.speed = {}: must be within (0, 100000]", c.daemon.speed),
            ));
        }
        let policy =
            coolplane_policies::by_name(&c.daemon.policy).map_err(|e| cfg_err(file, format!("daemon.policy: {e}")))?;
        if coolplane_policies::simulation_only(&c.daemon.policy) {
            return Err(cfg_err(
                file,
                format!(
                    "daemon.policy = `{}`: a reference that searches copies of the simulated plant's truth; it never runs against equipment (use it in `coolplane scenario`)",
                    c.daemon.policy
                ),
            ));
        }
        c.controller.validate().map_err(|e| cfg_err(file, e))?;
        c.controller
            .check_policy(policy.as_ref())
            .map_err(|e| cfg_err(file, format!("daemon.policy: {e}")))?;
        if let Some(m) = &c.mqtt {
            if m.host.trim().is_empty() {
                return Err(cfg_err(file, "mqtt.host is empty: name the broker's host"));
            }
            if m.port == 0 {
                return Err(cfg_err(file, "mqtt.port = 0: must be within [1, 65535]"));
            }
        }
        if let Some(api) = &c.api {
            api.validate().map_err(|e| cfg_err(file, e))?;
        }
        if let Some(m) = &c.mqtt {
            m.validate().map_err(|e| cfg_err(file, e))?;
        }
        if let Some(h) = &c.history {
            h.validate().map_err(|e| cfg_err(file, e))?;
        }
        if let Some(w) = &c.web {
            w.validate().map_err(|e| cfg_err(file, e))?;
        }
        for (i, d) in c.devices.iter().enumerate() {
            d.address
                .parse::<SocketAddr>()
                .map_err(|e| cfg_err(file, format!("device[{i}].address = {:?}: {e}", d.address)))?;
            if !(d.poll_s.is_finite() && d.poll_s > 0.0) {
                return Err(cfg_err(
                    file,
                    format!("device[{i}].poll_s = {}: must be positive", d.poll_s),
                ));
            }
            if d.timeout_ms == 0 {
                return Err(cfg_err(
                    file,
                    format!("device[{i}].timeout_ms = 0: every request needs a timeout"),
                ));
            }
        }
        Ok(c)
    }
}

/// What the daemon shows each tick.
#[derive(Debug, Clone, PartialEq)]
pub struct TickStatus {
    /// Plant time, s.
    pub t_s: f64,
    /// Controller mode.
    pub mode: Mode,
    /// Utility-meter power, kW (NaN when unknown).
    pub facility_kw: f64,
    /// IT power, kW (NaN when unknown).
    pub it_kw: f64,
    /// Hottest GPU die reported, °C.
    pub hottest_gpu_c: f64,
    /// GPU slowdown limit, °C.
    pub slowdown_c: f64,
    /// Devices whose readings are bad now.
    pub devices_bad: usize,
    /// Racks with telemetry younger than the controller's staleness limit.
    pub racks_fresh: usize,
    /// Racks in all.
    pub racks: usize,
    /// Setpoint writes queued so far.
    pub writes: u64,
    /// The twin has finished its learning window and is calibrated.
    pub twin_calibrated: bool,
    /// Fraction of the twin's learning window done, 0–1.
    pub twin_learning: f64,
    /// Smallest GPU-group thermal margin the twin estimates, K (NaN when unknown).
    pub twin_margin_k: f64,
    /// Sensors the twin holds implausible now.
    pub twin_issues: u64,
    /// Maintenance findings so far.
    pub twin_maintenance: u64,
}

impl TickStatus {
    /// PUE now (meter readings).
    pub fn pue(&self) -> f64 {
        self.facility_kw / self.it_kw
    }
}

/// The daemon's counters at the end.
#[derive(Debug, Clone, Default)]
pub struct DaemonReport {
    /// Ticks run.
    pub ticks: u64,
    /// Setpoint writes queued.
    pub writes: u64,
    /// Writes refused by the adapters.
    pub refused: u64,
    /// Status of every device at the end, by name.
    pub devices: Vec<(String, DeviceStatus)>,
    /// MQTT counters.
    pub mqtt: Option<MqttStats>,
    /// Controller events.
    pub events: Vec<ControllerEvent>,
    /// Last tick's status.
    pub last: Option<TickStatus>,
    /// The twin's events (sensor plausibility, maintenance), at most 100,000.
    pub twin_events: Vec<coolplane_twin::TwinEvent>,
    /// The history writer's counters at the end (when configured).
    pub history: Option<history::HistoryStats>,
    /// What the observer counted (events, stale transitions, refused writes).
    pub observed: metrics::ObservedCounts,
}

/// A configured daemon, ready to run.
pub struct Daemon {
    wire: WirePlant,
    controller: Controller,
    tick_s: f64,
    clock: Clock,
    slowdown_c: f64,
    stale_after_s: f64,
    twin: coolplane_twin::Twin,
    twin_t0: Option<f64>,
    api: Option<http::ApiState>,
    operator: Option<operator::Operator>,
    site_name: String,
    metrics: metrics::DaemonMetrics,
    observer: metrics::Observer,
    history: Option<history::History>,
    web: Option<web::WebHub>,
    limits_in_flight: caps::LimitsInFlight,
}

fn load_map(base: &Path, spec: &str) -> Result<RegisterMap, String> {
    if let Some(name) = spec.strip_prefix("builtin:") {
        let text = builtin_map(name).ok_or_else(|| format!("no built-in register map `{name}`"))?;
        return RegisterMap::from_toml_str(spec, text).map_err(|e| e.to_string());
    }
    let path = base.join(spec);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    RegisterMap::from_toml_str(&path.display().to_string(), &text).map_err(|e| e.to_string())
}

impl DeviceRole {
    /// The role whose points a map must serve (`coolplane_adapters::points`): a CDU in a hall of
    /// two-phase immersion tanks is a tank's condenser-water skid.
    pub fn map_role(self, tank: bool) -> MapRole {
        match self {
            DeviceRole::Cdu if tank => MapRole::Tank,
            DeviceRole::Cdu => MapRole::Cdu,
            DeviceRole::Facility => MapRole::Facility,
            DeviceRole::Meter => MapRole::Meter,
        }
    }
}

/// Refuse a register map that lacks a point its role needs (listing every missing point, from
/// `coolplane_adapters::points`: the names the process image reads and writes), whose heartbeat
/// or setpoints cannot be written as the supervisor writes them, or a built-in map of another
/// role.
pub fn check_map_for_role(spec: &str, role: MapRole, map: &RegisterMap) -> Result<(), String> {
    if let Some(name) = spec.strip_prefix("builtin:") {
        let of = match name {
            "coolplane-cdu" => MapRole::Cdu,
            "coolplane-2pic-tank" => MapRole::Tank,
            "coolplane-facility" => MapRole::Facility,
            _ => MapRole::Meter,
        };
        // A CDU map and a tank map differ only in the tank's points: the point check says which
        // is missing (the tank map serves a CDU as well).
        let cdu_like = |r: MapRole| matches!(r, MapRole::Cdu | MapRole::Tank);
        if of != role && !(cdu_like(of) && cdu_like(role)) {
            return Err(format!("`{spec}` is the map of a {of:?} device, not of a {role:?}"));
        }
    }
    match check_map(map, role).refusal() {
        Some(why) => Err(format!("register map `{spec}` {why}")),
        None => Ok(()),
    }
}

impl Daemon {
    /// Build from a configuration (`base`: directory of the configuration file, for relative paths).
    /// Must be called inside a tokio runtime.
    pub fn new(cfg: &DaemonConfig, base: &Path, file: &str, clock: Clock) -> Result<Self, DaemonError> {
        let site: Site = match builtin_site(&cfg.daemon.site) {
            Ok(s) => s,
            Err(_) => {
                let path: PathBuf = base.join(&cfg.daemon.site);
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| cfg_err(file, format!("daemon.site: {}: {e}", path.display())))?;
                Site::from_toml_str(&path.display().to_string(), &text).map_err(|e| cfg_err(file, e.to_string()))?
            }
        };
        let topo = Topology::new(&site);
        let mut cdus: Vec<Option<_>> = (0..topo.cdus.len()).map(|_| None).collect();
        let mut facilities: Vec<Option<_>> = (0..topo.halls.len()).map(|_| None).collect();
        let mut meter = None;
        for (i, d) in cfg.devices.iter().enumerate() {
            let map = Arc::new(load_map(base, &d.map).map_err(|e| cfg_err(file, format!("device[{i}].map: {e}")))?);
            let tank = d.role == DeviceRole::Cdu
                && topo
                    .cdus
                    .get(d.index)
                    .is_some_and(|c| topo.hall_spec(&site, c.hall).immersion.is_some());
            check_map_for_role(&d.map, d.role.map_role(tank), &map)
                .map_err(|e| cfg_err(file, format!("device[{i}].map: {e}")))?;
            let addr: SocketAddr = d
                .address
                .parse()
                .map_err(|e| cfg_err(file, format!("device[{i}].address: {e}")))?;
            let name = match d.role {
                DeviceRole::Cdu => topo.cdus.get(d.index).map(|c| c.name.clone()),
                DeviceRole::Facility => topo.halls.get(d.index).map(|h| format!("{}-fws", h.name)),
                DeviceRole::Meter => Some(format!("{}-meter", site.site.name)),
            }
            .ok_or_else(|| {
                cfg_err(
                    file,
                    format!("device[{i}].index = {}: the site has no such {:?}", d.index, d.role),
                )
            })?;
            let mut dc = DeviceConfig::new(&name, addr, d.unit, map, d.poll_s);
            dc.timeout = Duration::from_millis(d.timeout_ms);
            dc.backoff_initial = Duration::from_millis(d.backoff_ms);
            dc.backoff_max = Duration::from_millis(d.backoff_max_ms.max(d.backoff_ms));
            let h = spawn_device(dc, clock);
            let slot = match d.role {
                DeviceRole::Cdu => &mut cdus[d.index],
                DeviceRole::Facility => &mut facilities[d.index],
                DeviceRole::Meter => &mut meter,
            };
            if slot.is_some() {
                return Err(cfg_err(
                    file,
                    format!("device[{i}]: a second device for {:?} {}", d.role, d.index),
                ));
            }
            *slot = Some(h);
        }
        let epoch_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
            - clock.now_s() / clock.speed();
        let mut operator = None;
        let mqtt = match cfg.mqtt.as_ref() {
            None => None,
            Some(m) => {
                m.validate().map_err(|e| cfg_err(file, e))?;
                let racks: Vec<String> = topo.racks.iter().map(|r| r.name.clone()).collect();
                let gpus: Vec<usize> = topo.racks.iter().map(|r| r.gpus.len()).collect();
                let mut mc = MqttConfig::new(
                    &m.host,
                    m.port,
                    &m.client_id,
                    &site.site.name,
                    racks,
                    gpus,
                    site.gpu.slowdown_c as f32,
                );
                if let (Some(u), Some(pf)) = (&m.username, &m.password_file) {
                    let path = base.join(pf);
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| cfg_err(file, format!("mqtt.password_file: {}: {e}", path.display())))?;
                    let pw = text.lines().next().unwrap_or("").trim_end().to_string();
                    if pw.is_empty() {
                        return Err(cfg_err(file, format!("mqtt.password_file: {}: empty", path.display())));
                    }
                    mc.auth.credentials = Some((u.clone(), pw));
                }
                if let Some(ca) = &m.ca_file {
                    let path = base.join(ca);
                    let pem = std::fs::read(&path)
                        .map_err(|e| cfg_err(file, format!("mqtt.ca_file: {}: {e}", path.display())))?;
                    mc.auth.tls = Some(
                        coolplane_adapters::mqtt_auth::tls_client_config(&pem)
                            .map_err(|e| cfg_err(file, format!("mqtt.ca_file: {}: {e}", path.display())))?,
                    );
                }
                let op = operator::Operator::new(
                    operator::OperatorOptions {
                        accept_commands: m.accept_commands,
                        max_ttl_s: m.max_command_ttl_s,
                        commands_per_min: m.commands_per_min,
                        discovery: m.discovery,
                        expire_after_s: (cfg.controller.stale_after_s / cfg.daemon.speed).ceil().max(30.0) as u64,
                    },
                    &site.site.name,
                    topo.clone(),
                    epoch_unix_s,
                );
                mc.control_filters = op.filters();
                if m.accept_commands && m.username.is_none() {
                    tracing::warn!(
                        "MQTT commands accepted without authentication (mqtt.allow_unauthenticated_commands)"
                    );
                    eprintln!(
                        "coolplane: WARNING: accepting MQTT commands over a link without credentials \
                         (mqtt.allow_unauthenticated_commands = true): anyone who reaches {}:{} can command setpoints",
                        m.host, m.port
                    );
                }
                operator = Some(op);
                Some(MqttLink::start(mc, clock))
            }
        };
        if coolplane_policies::simulation_only(&cfg.daemon.policy) {
            return Err(cfg_err(
                file,
                format!(
                    "daemon.policy = `{}`: simulation only, never run against equipment",
                    cfg.daemon.policy
                ),
            ));
        }
        let policy = coolplane_policies::by_name(&cfg.daemon.policy)
            .map_err(|e| cfg_err(file, format!("daemon.policy: {e}")))?;
        let controller = Controller::new(&site, policy, cfg.controller);
        let api = cfg.api.as_ref().map(|a| {
            http::ApiState::new(
                &site,
                a,
                Arc::new(move || clock.now_s()),
                epoch_unix_s,
                cfg.controller.stale_after_s,
            )
        });
        let metrics = metrics::DaemonMetrics::default();
        let api = api.map(|a| a.with_daemon_metrics(metrics.clone()));
        let history = match &cfg.history {
            Some(h) => {
                let mut h = h.clone();
                h.spill_dir = h.spill_dir.map(|d| base.join(d));
                Some(history::History::start(&h).map_err(|e| cfg_err(file, e))?)
            }
            None => None,
        };
        let web = cfg.web.as_ref().map(|_| web::WebHub::new(metrics.clone()));
        // A command is judged lost once telemetry sampled two ticks after it still shows another
        // limit (latency of a command plus a telemetry interval, with room to spare).
        let limits_in_flight = caps::LimitsInFlight::new(
            topo.racks.len(),
            2.0 * cfg.daemon.tick_s,
            (site.gpu.min_cap_w as f32, site.gpu.tdp_w as f32),
        );
        Ok(Self {
            limits_in_flight,
            wire: WirePlant::new(topo, cdus, facilities, meter, mqtt),
            controller,
            tick_s: cfg.daemon.tick_s,
            clock,
            slowdown_c: site.gpu.slowdown_c,
            stale_after_s: cfg.controller.stale_after_s,
            twin: coolplane_twin::Twin::new(
                coolplane_twin::Nameplate::from_site(&site),
                coolplane_twin::TwinConfig::default(),
            ),
            twin_t0: None,
            api,
            operator,
            site_name: site.site.name.clone(),
            metrics,
            observer: metrics::Observer::default(),
            history,
            web,
        })
    }

    /// The live web page's state, when the configuration has a `[web]` table (serve it with
    /// [`web::serve`]).
    pub fn web(&self) -> Option<web::WebHub> {
        self.web.clone()
    }

    /// The daemon's metrics registry.
    pub fn metrics(&self) -> metrics::DaemonMetrics {
        self.metrics.clone()
    }

    /// The digital twin running on the live process image (estimates, calibration, events).
    pub fn twin(&self) -> &coolplane_twin::Twin {
        &self.twin
    }

    /// The budget API's state, when the configuration has an `[api]` table (serve it with
    /// [`http::serve`]).
    pub fn api(&self) -> Option<http::ApiState> {
        self.api.clone()
    }

    /// The controller (mode, setpoints, limits).
    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    /// The wire-side plant (devices, MQTT link).
    pub fn wire(&self) -> &WirePlant {
        &self.wire
    }

    /// One tick now: image → controller → actions. Returns the status line.
    pub fn tick(&mut self, report: &mut DaemonReport) -> TickStatus {
        let started = std::time::Instant::now();
        let now = self.clock.now_s();
        let m = self.wire.measurements(now);
        // Operator commands received since the last tick act on this tick (through the safety
        // envelope); lapsed leases revert.
        if let (Some(op), Some(mqtt)) = (self.operator.as_mut(), self.wire.mqtt.as_ref()) {
            op.before_tick(now, &mut self.controller, self.api.as_ref(), mqtt);
        }
        let mut actions = self.controller.tick(now, &m);
        if let Some(api) = &self.api {
            api.on_tick(now, &m, &mut actions);
        }
        self.resend_lost_limits(now, &m, &mut actions);
        // The twin: the same code as in simulation, on the same process image.
        if !self.twin.update(&m) {
            tracing::error!("twin: process image does not match the site; snapshot ignored");
        }
        self.twin_t0.get_or_insert(now);
        for e in self.twin.drain_events() {
            match e.kind {
                coolplane_twin::TwinEventKind::SensorImplausible { sensor, issue } => {
                    tracing::warn!(t_s = e.t_s, sensor = ?sensor, issue = ?issue, "twin: sensor implausible")
                }
                coolplane_twin::TwinEventKind::SensorRecovered { sensor } => {
                    tracing::info!(t_s = e.t_s, sensor = ?sensor, "twin: sensor plausible again")
                }
                coolplane_twin::TwinEventKind::Maintenance { cdu, finding, loss } => tracing::warn!(
                    t_s = e.t_s,
                    cdu,
                    finding = ?finding,
                    loss_pct = loss * 100.0,
                    "twin: CDU needs maintenance"
                ),
                coolplane_twin::TwinEventKind::Calibrated => {
                    tracing::info!(t_s = e.t_s, "twin: calibrated from telemetry")
                }
            }
            if report.twin_events.len() < 100_000 {
                report.twin_events.push(e);
            }
        }
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let applied = self.wire.apply(&actions, unix_ms);
        report.ticks += 1;
        report.writes += applied.writes_queued as u64;
        report.refused += applied.refused.len() as u64;
        let refused: Vec<String> = applied.refused.iter().map(|r| r.to_string()).collect();
        let events = self.controller.drain_events();
        let plans = self.controller.take_plans();
        for p in &plans {
            tracing::info!(
                status = %p.status,
                binding = %p.binding,
                predicted_facility_kw = p.predicted.map_or(f64::NAN, |x| x.facility_kw),
                "energy plan: {}",
                p.reasons.first().map_or("", |s| s.as_str())
            );
        }
        self.observer.observe_plans(&plans);
        if let (Some(op), Some(mqtt), Some(p)) = (self.operator.as_mut(), self.wire.mqtt.as_ref(), plans.last()) {
            op.publish_plan(p, mqtt);
        }
        self.observe(now, &m, unix_ms, &events, &refused, applied.writes_queued, started);
        report.observed = self.observer.counts.clone();
        let hottest = m
            .racks
            .iter()
            .filter(|r| r.gpu_temp_max_c.usable(now, self.stale_after_s))
            .map(|r| r.gpu_temp_max_c.value)
            .fold(f64::NAN, f64::max);
        let bad = self
            .wire
            .cdus
            .iter()
            .chain(self.wire.facilities.iter())
            .chain(std::iter::once(&self.wire.meter))
            .flatten()
            .filter(|d| d.status().consecutive_failures > 0)
            .count();
        let st = TickStatus {
            t_s: now,
            mode: self.controller.mode(),
            facility_kw: if m.meter.facility_power_kw.usable(now, self.stale_after_s) {
                m.meter.facility_power_kw.value
            } else {
                f64::NAN
            },
            it_kw: if m.meter.it_power_kw.usable(now, self.stale_after_s) {
                m.meter.it_power_kw.value
            } else {
                f64::NAN
            },
            hottest_gpu_c: hottest,
            slowdown_c: self.slowdown_c,
            devices_bad: bad,
            racks_fresh: m
                .racks
                .iter()
                .filter(|r| r.gpu_temp_max_c.usable(now, self.stale_after_s))
                .count(),
            racks: m.racks.len(),
            writes: report.writes,
            twin_calibrated: self.twin.calibrated(),
            twin_learning: self.twin_t0.map_or(0.0, |t0| {
                ((now - t0) / coolplane_twin::TwinConfig::default().learn_s).clamp(0.0, 1.0)
            }),
            twin_margin_k: self
                .twin
                .estimate()
                .halls
                .iter()
                .map(|h| h.margin_k.value)
                .fold(f64::NAN, f64::min),
            twin_issues: self.twin.counters().issues_active,
            twin_maintenance: self.twin.counters().maintenance,
        };
        if let (Some(op), Some(mqtt)) = (self.operator.as_mut(), self.wire.mqtt.as_ref()) {
            let wire = &self.wire;
            let device_ok = |name: &str| {
                wire.cdus
                    .iter()
                    .chain(wire.facilities.iter())
                    .flatten()
                    .find(|d| d.name() == name)
                    .map(|d| d.status().connected && d.status().consecutive_failures == 0)
            };
            op.after_tick(
                now,
                &m,
                &st,
                &self.controller,
                &self.twin,
                self.api.as_ref(),
                mqtt,
                &device_ok,
                &events,
                self.stale_after_s,
            );
        }
        if report.events.len() < 100_000 {
            report.events.extend(events);
        }
        report.last = Some(st.clone());
        st
    }

    /// The operator layer (MQTT state, discovery, commands), when there is an `[mqtt]` table.
    pub fn operator(&self) -> Option<&operator::Operator> {
        self.operator.as_ref()
    }

    /// The budget API's fast path: a limit changed, so feed the ledger and send the racks their
    /// new caps now (power limits only: no setpoint, no heartbeat) instead of at the next tick.
    pub fn caps_now(&mut self, report: &mut DaemonReport) -> usize {
        let Some(api) = &self.api else { return 0 };
        let now = self.clock.now_s();
        let m = self.wire.measurements(now);
        let mut actions = coolplane_core::signals::Actions::default();
        let n = api.on_tick(now, &m, &mut actions);
        self.resend_lost_limits(now, &m, &mut actions);
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let applied = self.wire.apply(&actions, unix_ms);
        report.refused += applied.refused.len() as u64;
        for r in applied.refused {
            self.observer.counts.writes_refused += 1;
            tracing::warn!(reason = %r, "write refused");
        }
        n
    }

    /// Remember the power limits sent now and send again those that fresh telemetry shows not in
    /// force (lost while the broker or a rack agent was down); each is logged and counted.
    fn resend_lost_limits(
        &mut self,
        now: f64,
        m: &coolplane_core::signals::Measurements,
        actions: &mut coolplane_core::signals::Actions,
    ) {
        for r in self.limits_in_flight.check(now, m, &self.wire.topology, actions) {
            self.observer.counts.power_limits_resent += 1;
            let rack = self
                .wire
                .topology
                .racks
                .get(r.rack as usize)
                .map_or("?", |x| x.name.as_str());
            tracing::warn!(
                rack,
                gpus = r.gpus_differing,
                sent_at_s = r.sent_at_s,
                t_s = now,
                "power limits sent earlier are not in force (telemetry reports others): sent again"
            );
        }
    }

    fn devices(&self) -> Vec<(String, coolplane_adapters::modbus::DeviceStatus)> {
        self.wire
            .cdus
            .iter()
            .chain(self.wire.facilities.iter())
            .chain(std::iter::once(&self.wire.meter))
            .flatten()
            .map(|d| (d.name().to_string(), d.status()))
            .collect()
    }

    /// The operator outputs of a tick: snapshot, logs and counts, metrics, history, web page.
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)]
    fn observe(
        &mut self,
        now: f64,
        m: &coolplane_core::signals::Measurements,
        unix_ms: i64,
        events: &[ControllerEvent],
        refused: &[String],
        writes_queued: usize,
        started: std::time::Instant,
    ) {
        let snap = snapshot::Snapshot::from_image(
            &self.site_name,
            &self.wire.topology,
            m,
            now,
            self.stale_after_s,
            &format!("{:?}", self.controller.mode()),
            self.slowdown_c,
            unix_ms,
        );
        let devices = self.devices();
        let mqtt = self.wire.mqtt.as_ref().map(|l| l.stats());
        self.observer
            .observe(&snap, &devices, mqtt.as_ref(), events, refused, writes_queued);
        self.metrics.update(
            &snap,
            devices,
            mqtt,
            &self.observer.counts,
            started.elapsed().as_secs_f64(),
        );
        if let Some(h) = &self.history {
            h.submit(history::lines(&snap));
            self.metrics.set_history(h.stats());
        }
        if let Some(w) = &self.web {
            w.publish(&snap, &self.observer.notes);
        }
    }

    /// Run ticks until `shutdown` resolves, calling `on_tick` after each.
    pub async fn run(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
        mut on_tick: impl FnMut(&TickStatus),
    ) -> DaemonReport {
        let mut report = DaemonReport::default();
        tokio::pin!(shutdown);
        let mut next = self.clock.now_s() + self.tick_s;
        let kick = self.api.as_ref().map(|a| a.kick());
        loop {
            let wait = self.clock.wall(next - self.clock.now_s());
            let kicked = async {
                match &kick {
                    Some(k) => k.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(wait) => {}
                _ = kicked => {
                    self.caps_now(&mut report);
                    continue;
                }
            }
            let st = self.tick(&mut report);
            on_tick(&st);
            next += self.tick_s;
            // Never try to catch up a backlog of ticks: the controller acts on the latest image.
            let now = self.clock.now_s();
            if next < now {
                next = now + self.tick_s;
            }
        }
        report.devices = self.devices();
        report.mqtt = self.wire.mqtt.as_ref().map(|m| m.stats());
        if let Some(h) = self.history.take() {
            let st = h.close().await;
            self.metrics.set_history(st.clone());
            report.history = Some(st);
        }
        report
    }
}
