//! Operators over MQTT: retained state for dashboards, Home Assistant discovery, events, and
//! commands as leases.
//!
//! Each tick the daemon calls [`Operator::before_tick`] (commands received since the last tick
//! are parsed, rate-limited and passed through the controller's safety envelope or the ledger;
//! leases that lapsed revert) and [`Operator::after_tick`] (state of the site, every hall, CDU and
//! rack, the budget of the site, hall and CDU domains, the mode, availability and events are
//! published). Everything retained is published again in full after every (re)connect, because
//! a broker (an embedded one especially) may lose retained messages; discovery is published
//! again whenever Home Assistant says `online` on `homeassistant/status`.
//!
//! Commands: retained command messages are ignored (nothing replays at start-up) and counted;
//! every command needs a `request_id` and a `ttl_s`, and its result goes to
//! `…/cmd_result/{request_id}`. Who may command is the broker's business (its ACL); the daemon
//! refuses to listen for commands over an unauthenticated link unless its configuration says
//! `allow_unauthenticated_commands = true`.

use crate::http::{time::format_unix, ApiState};
use crate::TickStatus;
use coolplane_adapters::mqtt::MqttLink;
use coolplane_adapters::operator::{
    parse_command, Command, CommandResult, CommandTarget, CommandValue, HaDevice, HaEntity, OperatorMode,
    OperatorTopics, ResultStatus, HA_STATUS_TOPIC,
};
use coolplane_adapters::telemetry::Topics;
use coolplane_controller::ledger::{DomainKind, LimitOverride};
use coolplane_controller::{Controller, ControllerEvent, Mode, OperatorPoint, Severity};
use coolplane_core::signals::{Measurements, Reading};
use coolplane_core::topology::Topology;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};

/// Settings of the operator layer (from the `[mqtt]` table).
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorOptions {
    /// Listen for commands.
    pub accept_commands: bool,
    /// Longest lease, s of plant time.
    pub max_ttl_s: f64,
    /// Commands accepted per minute of plant time, all operators together.
    pub commands_per_min: usize,
    /// Publish Home Assistant discovery.
    pub discovery: bool,
    /// Home Assistant shows a value unavailable this long after its last state message, s.
    pub expire_after_s: u64,
}

/// Counters of the operator layer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorStats {
    /// Commands accepted.
    pub accepted: u64,
    /// Commands refused (malformed, out of range, rate-limited, unknown target).
    pub rejected: u64,
    /// Retained command messages ignored.
    pub retained_ignored: u64,
    /// Energy plans published.
    pub plans_published: u64,
    /// Leases that lapsed and reverted.
    pub expired: u64,
    /// Full republications (first connect, reconnects).
    pub republished: u64,
    /// Discovery publications.
    pub discovery_published: u64,
}

#[derive(Debug, Clone)]
struct Lease {
    request_id: String,
    target: CommandTarget,
    expires_s: f64,
    /// Mode to go back to (mode leases).
    prev_mode: Option<Mode>,
}

/// The operator layer of a daemon.
pub struct Operator {
    opts: OperatorOptions,
    topics: Topics,
    site: String,
    topo: Topology,
    epoch_unix_s: f64,
    leases: BTreeMap<String, Lease>,
    seen_connects: u64,
    discovery_due: bool,
    pue: VecDeque<(f64, f64, f64)>,
    recent: VecDeque<f64>,
    availability: BTreeMap<String, &'static str>,
    republish: bool,
    /// Counters.
    pub stats: OperatorStats,
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Auto => "auto",
        Mode::Manual => "manual",
        Mode::Safe => "safe",
    }
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Critical => "critical",
    }
}

/// A reading's value when it is fresh, else JSON null (never a stale value shown as current).
fn fresh(r: &Reading, now_s: f64, stale_after_s: f64) -> Value {
    if r.usable(now_s, stale_after_s) && r.value.is_finite() {
        json!((r.value * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

fn num(x: f64) -> Value {
    if x.is_finite() {
        json!((x * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

/// PUE over a window: energy-weighted (Σ facility / Σ IT over the samples within `window_s`).
pub fn windowed_pue(samples: &VecDeque<(f64, f64, f64)>, now_s: f64, window_s: f64) -> f64 {
    let (f, i) = samples
        .iter()
        .filter(|(t, _, _)| now_s - t <= window_s)
        .fold((0.0, 0.0), |(f, i), (_, a, b)| (f + a, i + b));
    if i > 0.0 {
        f / i
    } else {
        f64::NAN
    }
}

/// Cooling power, kW: CDU pumps and the facility water systems (fans, pumps, chillers); NaN when
/// any part is unknown (a partial sum would understate it).
pub fn cooling_kw(m: &Measurements, now_s: f64, stale_after_s: f64) -> f64 {
    let mut sum = 0.0;
    for c in &m.cdus {
        if !c.pump_power_kw.usable(now_s, stale_after_s) {
            return f64::NAN;
        }
        sum += c.pump_power_kw.value;
    }
    for f in &m.facilities {
        for r in [&f.fan_power_kw, &f.pump_power_kw, &f.chiller_power_kw] {
            if !r.usable(now_s, stale_after_s) {
                return f64::NAN;
            }
            sum += r.value;
        }
    }
    sum
}

/// Heat-reuse heat pumps, kW: a hall whose map has no such point (never read) counts 0; NaN
/// when a mapped one is bad or stale (its power would otherwise hide in the losses).
pub fn heat_pump_kw(m: &Measurements, now_s: f64, stale_after_s: f64) -> f64 {
    let mut sum = 0.0;
    for f in &m.facilities {
        let r = &f.heat_pump_power_kw;
        if r.usable(now_s, stale_after_s) {
            sum += r.value;
        } else if r.t_s != f64::NEG_INFINITY {
            return f64::NAN;
        }
    }
    sum
}

/// Publish an availability topic when it changes (and after a republication, which clears `seen`).
fn set_availability(seen: &mut BTreeMap<String, &'static str>, mqtt: &MqttLink, topic: &str, ok: Option<bool>) {
    let v = if ok == Some(true) { "online" } else { "offline" };
    if seen.get(topic) != Some(&v) {
        mqtt.publish(topic.to_string(), v.as_bytes().to_vec(), true);
        seen.insert(topic.to_string(), v);
    }
}

impl Operator {
    /// The operator layer of `site` with topology `topo`; `epoch_unix_s` is the UTC time of plant
    /// time zero (for the times in payloads).
    pub fn new(opts: OperatorOptions, site: &str, topo: Topology, epoch_unix_s: f64) -> Self {
        Self {
            opts,
            topics: Topics::new(site),
            site: site.to_string(),
            topo,
            epoch_unix_s,
            leases: BTreeMap::new(),
            seen_connects: 0,
            discovery_due: true,
            pue: VecDeque::new(),
            recent: VecDeque::new(),
            availability: BTreeMap::new(),
            republish: true,
            stats: OperatorStats::default(),
        }
    }

    /// Subscriptions the MQTT link needs for this layer.
    pub fn filters(&self) -> Vec<String> {
        let mut f = Vec::new();
        if self.opts.accept_commands {
            f.extend(self.topics.command_filters());
        }
        if self.opts.discovery {
            f.push(HA_STATUS_TOPIC.to_string());
        }
        f
    }

    fn ts(&self, plant_s: f64) -> String {
        format_unix(self.epoch_unix_s + plant_s)
    }

    /// Leases in force: (target key, request id, expiry in plant s).
    pub fn leases(&self) -> Vec<(String, String, f64)> {
        self.leases
            .iter()
            .map(|(k, l)| (k.clone(), l.request_id.clone(), l.expires_s))
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn result(
        &self,
        mqtt: &MqttLink,
        now_s: f64,
        request_id: &str,
        status: ResultStatus,
        target: &str,
        applied: Option<Value>,
        expires_s: Option<f64>,
        detail: String,
    ) {
        let r = CommandResult {
            request_id: request_id.to_string(),
            status,
            target: target.to_string(),
            applied,
            expires_at: expires_s.map(|t| self.ts(t)),
            detail,
            ts: self.ts(now_s),
        };
        mqtt.publish(self.topics.cmd_result(request_id), r.to_json(), false);
    }

    /// Before the controller's tick: reconnects, Home Assistant's status, commands, lease expiry.
    pub fn before_tick(&mut self, now_s: f64, ctl: &mut Controller, api: Option<&ApiState>, mqtt: &MqttLink) {
        let connects = mqtt.stats().connects;
        if connects != self.seen_connects {
            self.seen_connects = connects;
            self.republish = true;
            self.discovery_due = true;
        }
        for msg in mqtt.drain_control() {
            if msg.topic == HA_STATUS_TOPIC {
                if msg.payload.as_slice() == b"online" {
                    tracing::info!("Home Assistant is online: publishing discovery again");
                    self.discovery_due = true;
                }
                continue;
            }
            if msg.retain {
                self.stats.retained_ignored += 1;
                tracing::warn!(topic = %msg.topic, "retained command ignored (commands are never replayed)");
                eprintln!("coolplane operator: retained command on {} ignored", msg.topic);
                continue;
            }
            match parse_command(&self.topics, &msg.topic, &msg.payload, self.opts.max_ttl_s) {
                Ok(c) => self.apply(now_s, c, ctl, api, mqtt),
                Err(e) => {
                    self.stats.rejected += 1;
                    tracing::warn!(topic = %msg.topic, error = %e, "command refused");
                    eprintln!("coolplane operator: command on {} refused: {e}", msg.topic);
                    if let Some(id) = &e.request_id {
                        let target = coolplane_adapters::operator::command_target(&self.topics, &msg.topic)
                            .map(|t| t.key())
                            .unwrap_or_default();
                        self.result(
                            mqtt,
                            now_s,
                            id,
                            ResultStatus::Rejected,
                            &target,
                            None,
                            None,
                            e.to_string(),
                        );
                    }
                }
            }
        }
        // Leases that lapsed revert.
        let lapsed: Vec<String> = self
            .leases
            .iter()
            .filter(|(_, l)| l.expires_s <= now_s)
            .map(|(k, _)| k.clone())
            .collect();
        for k in lapsed {
            if let Some(l) = self.leases.remove(&k) {
                self.revert(now_s, &l, ctl, api);
                self.stats.expired += 1;
                tracing::info!(target = %k, request_id = %l.request_id, "operator lease expired: reverted");
                eprintln!("coolplane operator: lease {} on {k} expired: reverted", l.request_id);
                self.result(
                    mqtt,
                    now_s,
                    &l.request_id,
                    ResultStatus::Expired,
                    &k,
                    None,
                    None,
                    "the lease lapsed: reverted".into(),
                );
            }
        }
    }

    fn revert(&self, now_s: f64, l: &Lease, ctl: &mut Controller, api: Option<&ApiState>) {
        match &l.target {
            CommandTarget::Mode => ctl.set_mode(l.prev_mode.unwrap_or(Mode::Auto), now_s),
            CommandTarget::CduSupply(c) | CommandTarget::CduFlow(c) | CommandTarget::FacilitySupply(c) => {
                if let Some(p) = self.point(&l.target, c) {
                    let _ = ctl.set_operator_setpoint(p, None, now_s);
                }
            }
            CommandTarget::DomainLimit(d) => {
                // The ledger lapses the override itself at the same instant; a release clears it.
                if let Some(api) = api {
                    let mut b = api.lock();
                    if let Some(id) = b.ledger.domain_id(d) {
                        if b.ledger.domains()[id].override_.is_some() {
                            let _ = b.ledger.set_override(id, None, now_s);
                        }
                    }
                    api.kick().notify_one();
                }
            }
        }
    }

    fn point(&self, target: &CommandTarget, name: &str) -> Option<OperatorPoint> {
        match target {
            CommandTarget::CduSupply(_) => self
                .topo
                .cdus
                .iter()
                .position(|c| c.name == name)
                .map(OperatorPoint::CduSupply),
            CommandTarget::CduFlow(_) => self
                .topo
                .cdus
                .iter()
                .position(|c| c.name == name)
                .map(OperatorPoint::CduFlow),
            CommandTarget::FacilitySupply(_) => self
                .topo
                .halls
                .iter()
                .position(|h| h.name == name)
                .map(OperatorPoint::FacilitySupply),
            _ => None,
        }
    }

    fn apply(&mut self, now_s: f64, c: Command, ctl: &mut Controller, api: Option<&ApiState>, mqtt: &MqttLink) {
        let key = c.target.key();
        let reject = |this: &mut Self, detail: String| {
            this.stats.rejected += 1;
            tracing::warn!(request_id = %c.request_id, target = %key, %detail, "command refused");
            eprintln!(
                "coolplane operator: command {} on {key} refused: {detail}",
                c.request_id
            );
            this.result(
                mqtt,
                now_s,
                &c.request_id,
                ResultStatus::Rejected,
                &key,
                None,
                None,
                detail,
            );
        };
        // Rate limit over the last minute of plant time, all operators together.
        while self.recent.front().is_some_and(|t| now_s - t >= 60.0) {
            self.recent.pop_front();
        }
        if self.recent.len() >= self.opts.commands_per_min {
            return reject(
                self,
                format!("rate limit: at most {} commands per minute", self.opts.commands_per_min),
            );
        }
        self.recent.push_back(now_s);
        if c.value == CommandValue::Release {
            let Some(l) = self.leases.remove(&key) else {
                return reject(self, format!("no lease in force on {key}"));
            };
            self.revert(now_s, &l, ctl, api);
            self.stats.accepted += 1;
            let detail = format!("lease {} released: reverted", l.request_id);
            tracing::info!(target = %key, request_id = %c.request_id, "{detail}");
            eprintln!("coolplane operator: {key}: {detail}");
            self.result(
                mqtt,
                now_s,
                &l.request_id,
                ResultStatus::Released,
                &key,
                None,
                None,
                detail.clone(),
            );
            if l.request_id != c.request_id {
                self.result(
                    mqtt,
                    now_s,
                    &c.request_id,
                    ResultStatus::Released,
                    &key,
                    None,
                    None,
                    detail,
                );
            }
            return;
        }
        let expires_s = now_s + c.ttl_s;
        let prev = self.leases.get(&key).cloned();
        let mut prev_mode = None;
        let applied: Result<(Value, String), String> = match (&c.target, &c.value) {
            (CommandTarget::Mode, CommandValue::Mode(m)) => {
                prev_mode = Some(
                    prev.as_ref()
                        .and_then(|l| l.prev_mode)
                        .unwrap_or(ctl.requested_mode()),
                );
                let mode = match m {
                    OperatorMode::Auto => Mode::Auto,
                    OperatorMode::Manual => Mode::Manual,
                    OperatorMode::Safe => Mode::Safe,
                };
                ctl.set_mode(mode, now_s);
                Ok((
                    json!(m.name()),
                    format!(
                        "mode {} requested (in force: {}; safe while the process image is stale)",
                        m.name(),
                        mode_name(ctl.mode())
                    ),
                ))
            }
            (CommandTarget::CduSupply(n) | CommandTarget::CduFlow(n) | CommandTarget::FacilitySupply(n), CommandValue::Number(v)) => {
                match self.point(&c.target, n) {
                    None => Err(format!("no such equipment `{n}` on site {}", self.site)),
                    Some(p) => ctl.set_operator_setpoint(p, Some(*v), now_s).map(|_| {
                        (
                            json!(v),
                            "held within the equipment range; moves at the controller's rate limit; the thermal guard and stale-data fallback still act".to_string(),
                        )
                    }),
                }
            }
            (CommandTarget::DomainLimit(d), CommandValue::Number(kw)) => match api {
                None => Err("no power budget on this daemon (no [api] table): domain limits are not available".into()),
                Some(api) => {
                    let mut b = api.lock();
                    match b.ledger.domain_id(d) {
                        None => Err(format!("no domain `{d}`")),
                        Some(id) => b
                            .ledger
                            .set_override(
                                id,
                                Some(LimitOverride {
                                    watts: kw * 1000.0,
                                    expires_s,
                                    reason: c.reason.clone().unwrap_or_else(|| format!("MQTT command {}", c.request_id)),
                                }),
                                now_s,
                            )
                            .map(|_| {
                                api.kick().notify_one();
                                (json!(kw), "limit override in force in the power-budget ledger".to_string())
                            })
                            .map_err(|e| e.to_string()),
                    }
                }
            },
            _ => Err(format!("`{}` does not fit this topic", c.target.value_field())),
        };
        match applied {
            Err(detail) => reject(self, detail),
            Ok((value, detail)) => {
                self.stats.accepted += 1;
                if let Some(p) = &prev {
                    if p.request_id != c.request_id {
                        self.result(
                            mqtt,
                            now_s,
                            &p.request_id,
                            ResultStatus::Superseded,
                            &key,
                            None,
                            None,
                            format!("replaced by {}", c.request_id),
                        );
                    }
                }
                tracing::info!(request_id = %c.request_id, target = %key, value = %value, ttl_s = c.ttl_s, "operator command accepted");
                eprintln!(
                    "coolplane operator: command {} on {key} = {value} accepted for {} s",
                    c.request_id, c.ttl_s
                );
                self.leases.insert(
                    key.clone(),
                    Lease {
                        request_id: c.request_id.clone(),
                        target: c.target.clone(),
                        expires_s,
                        prev_mode,
                    },
                );
                self.result(
                    mqtt,
                    now_s,
                    &c.request_id,
                    ResultStatus::Accepted,
                    &key,
                    Some(value),
                    Some(expires_s),
                    detail,
                );
            }
        }
    }

    /// The site's state message.
    #[allow(clippy::too_many_arguments)]
    pub fn site_state(
        &self,
        now_s: f64,
        m: &Measurements,
        st: &TickStatus,
        ctl: &Controller,
        twin: &coolplane_twin::Twin,
        stale_after_s: f64,
        budget: Option<(f64, f64)>,
    ) -> Value {
        let cooling = cooling_kw(m, now_s, stale_after_s);
        let heat_pump = heat_pump_kw(m, now_s, stale_after_s);
        let loss = st.facility_kw - st.it_kw - cooling - heat_pump;
        let (budget_kw, headroom_kw) = match budget {
            Some((b, h)) => (b, h),
            None => {
                let b = if m.meter.power_budget_kw.usable(now_s, stale_after_s) {
                    m.meter.power_budget_kw.value
                } else {
                    f64::NAN
                };
                (b, b - st.facility_kw)
            }
        };
        json!({
            "ts": self.ts(now_s),
            "t_s": num(now_s),
            "mode": mode_name(st.mode),
            "requested_mode": mode_name(ctl.requested_mode()),
            "policy": ctl.policy_name(),
            "pue": num(st.pue()),
            "pue_1h": num(windowed_pue(&self.pue, now_s, 3600.0)),
            "pue_24h": num(windowed_pue(&self.pue, now_s, 86_400.0)),
            "facility_kw": num(st.facility_kw),
            "it_kw": num(st.it_kw),
            "cooling_kw": num(cooling),
            "heat_pump_kw": num(heat_pump),
            "loss_kw": num(loss),
            "budget_kw": num(budget_kw),
            "headroom_kw": num(headroom_kw),
            "hottest_gpu_c": num(st.hottest_gpu_c),
            "hottest_gpu_margin_k": num(st.slowdown_c - st.hottest_gpu_c),
            "racks_fresh": st.racks_fresh,
            "racks": st.racks,
            "devices_bad": st.devices_bad,
            "leases": self.leases.len(),
            "twin_calibrated": twin.calibrated(),
            "twin_margin_k": num(st.twin_margin_k),
            "twin_it_kw": num(twin.estimate().halls.iter().map(|h| h.it_kw.value).sum::<f64>()),
        })
    }

    /// Publish the controller's latest energy plan, retained, on `…/controller/plan`.
    pub fn publish_plan(&mut self, plan: &coolplane_policies::EnergyPlan, mqtt: &MqttLink) {
        if let Ok(v) = serde_json::to_vec(plan) {
            mqtt.publish(self.topics.controller_plan(), v, true);
            self.stats.plans_published += 1;
        }
    }

    /// After the controller's tick: publish state, budget, mode, availability, events, discovery.
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)]
    pub fn after_tick(
        &mut self,
        now_s: f64,
        m: &Measurements,
        st: &TickStatus,
        ctl: &Controller,
        twin: &coolplane_twin::Twin,
        api: Option<&ApiState>,
        mqtt: &MqttLink,
        device_ok: &dyn Fn(&str) -> Option<bool>,
        events: &[ControllerEvent],
        stale_after_s: f64,
    ) {
        if st.facility_kw.is_finite() && st.it_kw.is_finite() && st.it_kw > 0.0 {
            self.pue.push_back((now_s, st.facility_kw, st.it_kw));
        }
        while self.pue.front().is_some_and(|(t, _, _)| now_s - t > 86_400.0) || self.pue.len() > 100_000 {
            self.pue.pop_front();
        }
        if !mqtt.stats().connected {
            return;
        }
        let republish = std::mem::take(&mut self.republish);
        if republish {
            self.stats.republished += 1;
            self.availability.clear();
        }
        if self.opts.discovery && std::mem::take(&mut self.discovery_due) {
            for d in self.discovery(ctl) {
                mqtt.publish(
                    d.config_topic(),
                    serde_json::to_vec(&d.config_payload()).unwrap_or_default(),
                    true,
                );
            }
            self.stats.discovery_published += 1;
        }
        let t = &self.topics;
        mqtt.publish(t.status(), b"online".to_vec(), true);
        // Budget from the ledger when there is one.
        let mut budget = None;
        if let Some(api) = api {
            let b = api.lock();
            for d in b.ledger.domains() {
                if !matches!(d.kind, DomainKind::Site | DomainKind::Hall | DomainKind::Cdu) {
                    continue;
                }
                let (limit, src) = d.limit();
                if d.kind == DomainKind::Site {
                    budget = Some((limit / 1000.0, d.headroom_w() / 1000.0));
                }
                let v = json!({
                    "ts": self.ts(now_s),
                    "kind": format!("{:?}", d.kind).to_lowercase(),
                    "limit_kw": num(limit / 1000.0),
                    "limit_source": src.map(coolplane_controller::ledger::source_name),
                    "load_kw": num(d.load_w() / 1000.0),
                    "granted_kw": num(d.granted_w() / 1000.0),
                    "headroom_kw": num(d.headroom_w() / 1000.0),
                    "stale": d.stale,
                    "override_kw": d.override_.as_ref().map(|o| num(o.watts / 1000.0)),
                });
                mqtt.publish(t.domain_budget(&d.name), v.to_string().into_bytes(), true);
            }
        }
        let site = self.site_state(now_s, m, st, ctl, twin, stale_after_s, budget);
        mqtt.publish(t.site_state(), site.to_string().into_bytes(), true);
        mqtt.publish(t.controller_mode(), mode_name(st.mode).as_bytes().to_vec(), true);
        let est = twin.estimate();
        let op = ctl.operator_setpoints();
        for (h, hall) in self.topo.halls.iter().enumerate() {
            let f = &m.facilities[h];
            let it: f64 = hall.racks.clone().map(|r| m.racks[r].it_power_kw.value).sum();
            let he = est.halls.get(h);
            let v = json!({
                "ts": self.ts(now_s),
                "it_kw": num(it),
                "facility_supply_temp_c": fresh(&f.supply_temp_c, now_s, stale_after_s),
                "facility_return_temp_c": fresh(&f.return_temp_c, now_s, stale_after_s),
                "facility_supply_temp_setpoint_c": num(ctl.setpoints().facilities[h]),
                "operator_facility_supply_temp_setpoint_c": op.facility_supply_c[h],
                "fan_speed_pct": fresh(&f.fan_speed_pct, now_s, stale_after_s),
                "chiller_on": f.chiller_on,
                "adiabatic_on": f.adiabatic_on,
                "rejection_mode": ctl.setpoints().rejection_mode(h).name(),
                "rejection_mode_in_force": f.rejection_mode.map(|m| m.name()),
                "twin_margin_k": he.map(|e| num(e.margin_k.value)),
                "twin_it_kw": he.map(|e| num(e.it_kw.value)),
            });
            mqtt.publish(t.hall_state(&hall.name), v.to_string().into_bytes(), true);
            let name = format!("{}-fws", hall.name);
            set_availability(
                &mut self.availability,
                mqtt,
                &format!("{}/hall/{}/availability", t.root, hall.name),
                device_ok(&name),
            );
        }
        for (c, cdu) in self.topo.cdus.iter().enumerate() {
            let x = &m.cdus[c];
            let hottest = cdu
                .racks
                .clone()
                .filter(|r| m.racks[*r].gpu_temp_max_c.usable(now_s, stale_after_s))
                .map(|r| m.racks[r].gpu_temp_max_c.value)
                .fold(f64::NAN, f64::max);
            let ce = est.cdus.get(c);
            let v = json!({
                "ts": self.ts(now_s),
                "supply_temp_c": fresh(&x.supply_temp_c, now_s, stale_after_s),
                "return_temp_c": fresh(&x.return_temp_c, now_s, stale_after_s),
                "flow_lpm": fresh(&x.flow_lpm, now_s, stale_after_s),
                "heat_kw": fresh(&x.heat_kw, now_s, stale_after_s),
                "pump_power_kw": fresh(&x.pump_power_kw, now_s, stale_after_s),
                "valve_pct": fresh(&x.valve_pct, now_s, stale_after_s),
                "supply_temp_setpoint_c": num(ctl.setpoints().cdus[c].supply_c),
                "flow_setpoint_lpm": num(ctl.setpoints().cdus[c].flow_lpm),
                "device_supply_temp_setpoint_c": fresh(&x.supply_setpoint_c, now_s, stale_after_s),
                "operator_supply_temp_setpoint_c": op.cdu_supply_c[c],
                "operator_flow_setpoint_lpm": op.cdu_flow_lpm[c],
                "alarms": x.alarms,
                "local_fallback": x.local_fallback,
                "hottest_gpu_c": num(hottest),
                "hottest_gpu_margin_k": num(st.slowdown_c - hottest),
                "twin_heat_kw": ce.map(|e| num(e.heat_to_liquid_kw.value)),
                "twin_ua_kw_per_k": ce.map(|e| num(e.ua_kw_per_k.value)),
            });
            mqtt.publish(t.cdu_state(&cdu.name), v.to_string().into_bytes(), true);
            set_availability(
                &mut self.availability,
                mqtt,
                &t.cdu_availability(&cdu.name),
                device_ok(&cdu.name),
            );
        }
        for (r, rack) in self.topo.racks.iter().enumerate() {
            let x = &m.racks[r];
            let ok = x.gpu_temp_max_c.usable(now_s, stale_after_s);
            let v = json!({
                "ts": self.ts(now_s),
                "it_kw": fresh(&x.it_power_kw, now_s, stale_after_s),
                "hottest_gpu_c": fresh(&x.gpu_temp_max_c, now_s, stale_after_s),
                "hottest_gpu_margin_k": if ok { num(st.slowdown_c - x.gpu_temp_max_c.value) } else { Value::Null },
                "inlet_temp_c": fresh(&x.inlet_temp_c, now_s, stale_after_s),
                "outlet_temp_c": fresh(&x.outlet_temp_c, now_s, stale_after_s),
                "twin_it_kw": est.racks.get(r).map(|e| num(e.it_kw.value)),
            });
            mqtt.publish(t.rack_state(&rack.name), v.to_string().into_bytes(), true);
            set_availability(
                &mut self.availability,
                mqtt,
                &format!("{}/rack/{}/availability", t.root, rack.name),
                Some(ok),
            );
        }
        for e in events {
            let v = json!({
                "ts": self.ts(e.t_s),
                "t_s": num(e.t_s),
                "severity": severity_name(e.severity),
                "source": "controller",
                "message": e.message,
            });
            mqtt.publish(t.event(severity_name(e.severity)), v.to_string().into_bytes(), false);
        }
    }

    /// Home Assistant devices: the site, each hall, each CDU, and each CDU's rack row.
    pub fn discovery(&self, ctl: &Controller) -> Vec<HaDevice> {
        let t = &self.topics;
        let id = |kind: &str, name: &str| format!("coolplane_{}_{kind}_{name}", self.site).replace(['.', ' '], "_");
        let exp = self.opts.expire_after_s;
        let cmd = |topic: String| if self.opts.accept_commands { Some(topic) } else { None };
        let mut out = Vec::new();
        let mut site_e = vec![
            HaEntity::sensor("pue", "PUE", None, None),
            HaEntity::sensor("pue_1h", "PUE (1 h)", None, None),
            HaEntity::sensor("pue_24h", "PUE (24 h)", None, None),
            HaEntity::sensor("facility_kw", "Facility power", Some("power"), Some("kW")),
            HaEntity::sensor("it_kw", "IT power", Some("power"), Some("kW")),
            HaEntity::sensor("cooling_kw", "Cooling power", Some("power"), Some("kW")),
            HaEntity::sensor("heat_pump_kw", "Heat-reuse heat pump power", Some("power"), Some("kW")),
            HaEntity::sensor("loss_kw", "Losses and other power", Some("power"), Some("kW")),
            HaEntity::sensor("budget_kw", "Power budget", Some("power"), Some("kW")),
            HaEntity::sensor("headroom_kw", "Power headroom", Some("power"), Some("kW")),
            HaEntity::sensor("hottest_gpu_c", "Hottest GPU", Some("temperature"), Some("°C")),
            HaEntity::sensor(
                "hottest_gpu_margin_k",
                "Hottest GPU margin to slowdown",
                None,
                Some("K"),
            ),
            HaEntity::sensor("twin_margin_k", "Twin thermal margin", None, Some("K")),
        ];
        let mut mode = HaEntity::sensor("mode", "Controller mode", None, None);
        mode.platform = "select";
        mode.field = "requested_mode".into();
        mode.options = vec!["auto", "manual", "safe"];
        if let Some(topic) = cmd(format!("{}/controller/mode/set", t.root)) {
            mode.command_topic = Some(topic);
            site_e.push(mode);
        }
        out.push(HaDevice {
            id: id("site", "site"),
            name: format!("coolplane {}", self.site),
            model: "site".into(),
            state_topic: t.site_state(),
            availability: vec![t.status()],
            expire_after_s: exp,
            entities: site_e,
        });
        let limits = ctl.limits();
        for (h, hall) in self.topo.halls.iter().enumerate() {
            let mut e = vec![
                HaEntity::sensor("it_kw", "IT power", Some("power"), Some("kW")),
                HaEntity::sensor(
                    "facility_supply_temp_c",
                    "Facility water supply",
                    Some("temperature"),
                    Some("°C"),
                ),
                HaEntity::sensor(
                    "facility_return_temp_c",
                    "Facility water return",
                    Some("temperature"),
                    Some("°C"),
                ),
                HaEntity::sensor("twin_margin_k", "Twin thermal margin", None, Some("K")),
            ];
            if let Some(topic) = cmd(format!(
                "{}/hall/{}/facility_supply_temp_setpoint_c/set",
                t.root, hall.name
            )) {
                let mut n = HaEntity::sensor(
                    "facility_sp",
                    "Facility supply setpoint",
                    Some("temperature"),
                    Some("°C"),
                );
                n.platform = "number";
                n.field = "facility_supply_temp_setpoint_c".into();
                n.command_topic = Some(topic);
                n.range = Some((
                    limits.facilities[h].supply_min_c,
                    limits.facilities[h].supply_max_c,
                    0.1,
                ));
                e.push(n);
            }
            out.push(HaDevice {
                id: id("hall", &hall.name),
                name: format!("{} {}", self.site, hall.name),
                model: "hall".into(),
                state_topic: t.hall_state(&hall.name),
                availability: vec![t.status()],
                expire_after_s: exp,
                entities: e,
            });
        }
        for (c, cdu) in self.topo.cdus.iter().enumerate() {
            let mut e = vec![
                HaEntity::sensor("supply_temp_c", "Supply temperature", Some("temperature"), Some("°C")),
                HaEntity::sensor("return_temp_c", "Return temperature", Some("temperature"), Some("°C")),
                HaEntity::sensor("flow_lpm", "Flow", Some("volume_flow_rate"), Some("L/min")),
                HaEntity::sensor("heat_kw", "Heat removed", Some("power"), Some("kW")),
                HaEntity::sensor("pump_power_kw", "Pump power", Some("power"), Some("kW")),
                HaEntity::sensor("hottest_gpu_margin_k", "Hottest GPU margin", None, Some("K")),
            ];
            let l = limits.cdus[c];
            if let Some(topic) = cmd(format!("{}/cdu/{}/supply_temp_setpoint_c/set", t.root, cdu.name)) {
                let mut n = HaEntity::sensor("supply_sp", "Supply setpoint", Some("temperature"), Some("°C"));
                n.platform = "number";
                n.field = "supply_temp_setpoint_c".into();
                n.command_topic = Some(topic);
                n.range = Some((l.supply_min_c, l.supply_max_c, 0.1));
                e.push(n);
            }
            out.push(HaDevice {
                id: id("cdu", &cdu.name),
                name: format!("{} {}", self.site, cdu.name),
                model: "CDU".into(),
                state_topic: t.cdu_state(&cdu.name),
                availability: vec![t.status(), t.cdu_availability(&cdu.name)],
                expire_after_s: exp,
                entities: e,
            });
            // The rack row on this CDU's loop: one device, an entity pair per rack.
            let mut row = Vec::new();
            for r in cdu.racks.clone() {
                let name = &self.topo.racks[r].name;
                for (field, label, dc, unit) in [
                    ("hottest_gpu_c", "hottest GPU", Some("temperature"), Some("°C")),
                    ("it_kw", "IT power", Some("power"), Some("kW")),
                ] {
                    let mut s = HaEntity::sensor(&format!("{name}_{field}"), &format!("{name} {label}"), dc, unit);
                    s.field = field.into();
                    s.state_topic = Some(t.rack_state(name));
                    row.push(s);
                }
            }
            out.push(HaDevice {
                id: id("row", &cdu.name),
                name: format!("{} {} rack row", self.site, cdu.name),
                model: "rack row".into(),
                state_topic: t.cdu_state(&cdu.name),
                availability: vec![t.status()],
                expire_after_s: exp,
                entities: row,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coolplane_core::site::builtin_site;

    fn op() -> (Operator, Controller) {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let ctl = Controller::new(
            &site,
            coolplane_policies::by_name("trim-respond").unwrap(),
            Default::default(),
        );
        (
            Operator::new(
                OperatorOptions {
                    accept_commands: true,
                    max_ttl_s: 86_400.0,
                    commands_per_min: 30,
                    discovery: true,
                    expire_after_s: 120,
                },
                "hall-10k",
                topo,
                1.7e9,
            ),
            ctl,
        )
    }

    #[test]
    fn windowed_pue_weights_by_energy_and_forgets_old_samples() {
        let mut s = VecDeque::new();
        s.push_back((0.0, 1200.0, 1000.0));
        s.push_back((3000.0, 2200.0, 2000.0));
        s.push_back((3500.0, 1100.0, 1000.0));
        assert!((windowed_pue(&s, 3600.0, 3600.0) - 4500.0 / 4000.0).abs() < 1e-12);
        assert!((windowed_pue(&s, 4000.0, 1000.0) - 3300.0 / 3000.0).abs() < 1e-12);
        assert!(windowed_pue(&s, 1e6, 10.0).is_nan());
    }

    #[test]
    fn discovery_covers_site_halls_cdus_and_rack_rows() {
        let (o, ctl) = op();
        let d = o.discovery(&ctl);
        // 1 site + 1 hall + 12 CDUs + 12 rack rows on hall-10k.
        assert_eq!(d.len(), 1 + 1 + 12 + 12);
        let cdu = d.iter().find(|x| x.model == "CDU").unwrap();
        let p = cdu.config_payload();
        assert_eq!(p["availability"].as_array().unwrap().len(), 2);
        let sp = p["cmps"]
            .as_object()
            .unwrap()
            .values()
            .find(|c| c["p"] == "number")
            .unwrap();
        assert_eq!(sp["min"], ctl.limits().cdus[0].supply_min_c);
        assert!(sp["command_topic"]
            .as_str()
            .unwrap()
            .ends_with("/supply_temp_setpoint_c/set"));
        let row = d.iter().find(|x| x.model == "rack row").unwrap();
        assert_eq!(row.entities.len(), 24, "12 racks × (hottest GPU, IT power)");
        assert!(row.entities[0]
            .state_topic
            .as_deref()
            .unwrap()
            .ends_with("/rack/hall-a-r001/state"));
        let site = d[0].config_payload();
        assert_eq!(
            site["cmps"]["coolplane_hall-10k_site_site_pue"]["state_class"],
            "measurement"
        );
        assert_eq!(site["cmps"]["coolplane_hall-10k_site_site_mode"]["p"], "select");
        // Without commands, no command entities.
        let mut o2 = o;
        o2.opts.accept_commands = false;
        assert!(o2
            .discovery(&ctl)
            .iter()
            .all(|d| d.entities.iter().all(|e| e.command_topic.is_none())));
        assert!(o2.filters().iter().all(|f| !f.ends_with("/set")));
    }

    #[test]
    fn site_state_has_pue_power_stack_budget_and_margins() {
        let (o, ctl) = op();
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let twin = coolplane_twin::Twin::new(coolplane_twin::Nameplate::from_site(&site), Default::default());
        let mut m = Measurements {
            cdus: vec![Default::default(); topo.cdus.len()],
            facilities: vec![Default::default(); topo.halls.len()],
            racks: vec![Default::default(); topo.racks.len()],
            ..Default::default()
        };
        for c in &mut m.cdus {
            c.pump_power_kw = Reading::good(5.0, 100.0);
        }
        for f in &mut m.facilities {
            f.fan_power_kw = Reading::good(20.0, 100.0);
            f.pump_power_kw = Reading::good(10.0, 100.0);
            f.chiller_power_kw = Reading::good(0.0, 100.0);
        }
        m.meter.power_budget_kw = Reading::good(12_000.0, 100.0);
        let st = TickStatus {
            t_s: 100.0,
            mode: Mode::Auto,
            facility_kw: 10_000.0,
            it_kw: 9_000.0,
            hottest_gpu_c: 80.0,
            slowdown_c: 90.0,
            devices_bad: 0,
            racks_fresh: 144,
            racks: 144,
            writes: 0,
            twin_calibrated: false,
            twin_learning: 0.0,
            twin_margin_k: f64::NAN,
            twin_issues: 0,
            twin_maintenance: 0,
        };
        let v = o.site_state(100.0, &m, &st, &ctl, &twin, 180.0, None);
        assert_eq!(v["pue"], json!(1.111));
        assert_eq!(v["cooling_kw"], json!(12.0 * 5.0 + 30.0));
        assert_eq!(v["loss_kw"], json!(10_000.0 - 9_000.0 - 90.0));
        assert_eq!(v["budget_kw"], json!(12_000.0));
        assert_eq!(v["headroom_kw"], json!(2_000.0));
        assert_eq!(v["hottest_gpu_margin_k"], json!(10.0));
        assert_eq!(v["mode"], "auto");
        assert!(v["twin_margin_k"].is_null(), "unknown is null, never a number");
        assert!(v["ts"].as_str().unwrap().starts_with("2023-11-14T22:15"), "{}", v["ts"]);
        // A heat pump metered in a hall: its own part, out of the losses; a hall whose map has
        // no such point (never read) counts 0; a mapped one gone stale makes it unknown.
        m.facilities[0].heat_pump_power_kw = Reading::good(40.0, 100.0);
        let v = o.site_state(100.0, &m, &st, &ctl, &twin, 180.0, None);
        assert_eq!(v["heat_pump_kw"], json!(40.0));
        assert_eq!(v["loss_kw"], json!(10_000.0 - 9_000.0 - 90.0 - 40.0));
        for f in &mut m.facilities[1..] {
            f.heat_pump_power_kw = Reading {
                value: f64::NAN,
                t_s: f64::NEG_INFINITY,
                quality: coolplane_core::signals::Quality::Bad,
            };
        }
        let v = o.site_state(100.0, &m, &st, &ctl, &twin, 180.0, None);
        assert_eq!(v["heat_pump_kw"], json!(40.0));
        m.facilities[0].heat_pump_power_kw = Reading::good(40.0, -1000.0);
        let v = o.site_state(100.0, &m, &st, &ctl, &twin, 180.0, None);
        assert!(v["heat_pump_kw"].is_null() && v["loss_kw"].is_null());
        m.facilities[0].heat_pump_power_kw = Reading::good(0.0, 100.0);
        // A stale pump reading makes cooling unknown instead of understated.
        m.cdus[3].pump_power_kw = Reading::good(5.0, -1000.0);
        let v = o.site_state(100.0, &m, &st, &ctl, &twin, 180.0, None);
        assert!(v["cooling_kw"].is_null() && v["loss_kw"].is_null());
    }
}
