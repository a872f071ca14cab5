//! What operators see of the daemon besides the web page: Prometheus metrics (text exposition
//! format, every name `coolplane_*`) and structured log events (`tracing`).
//!
//! [`Observer`] looks at each tick's device counters, MQTT counters, refused writes, controller
//! events and freshness, logs every device error, refused write, stale transition and controller
//! event, and counts them. [`DaemonMetrics`] holds the latest values and renders them; the web
//! service serves them at `/metrics`, and the budget API appends them to its own `/metrics`.

use crate::history::HistoryStats;
use crate::snapshot::Snapshot;
use coolplane_adapters::modbus::DeviceStatus;
use coolplane_adapters::mqtt::MqttStats;
use coolplane_controller::{ControllerEvent, Severity};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

/// Counters the observer keeps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObservedCounts {
    /// Controller events by severity (`info`, `warning`, `critical`).
    pub controller_events: BTreeMap<&'static str, u64>,
    /// Stale transitions by kind (`rack`, `cdu`) and direction (`stale`, `fresh`).
    pub stale_transitions: BTreeMap<(&'static str, &'static str), u64>,
    /// Writes the adapters refused.
    pub writes_refused: u64,
    /// Setpoint writes queued.
    pub writes_queued: u64,
    /// Ticks.
    pub ticks: u64,
    /// Device link losses (connected → not connected).
    pub device_disconnects: u64,
    /// Rack power-limit commands sent again because telemetry showed them not in force.
    pub power_limits_resent: u64,
    /// The policy's energy plans by status (`optimised`, `fallback`, `other`).
    pub plans: BTreeMap<&'static str, u64>,
    /// Where the policy's weekly write allowance stood after its last plan (None: no allowance
    /// set, or no optimised plan yet).
    pub write_allowance: Option<coolplane_policies::WriteAllowance>,
    /// Candidate moves the write allowance refused, summed over plans.
    pub allowance_refused: u64,
}

/// One line of the operator's event log (the web page shows them).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Note {
    /// Plant time, s.
    pub t_s: f64,
    /// `info`, `warning` or `critical`.
    pub severity: &'static str,
    /// What happened.
    pub text: String,
}

/// Watches each tick and says what changed (logs) and counts it.
#[derive(Debug, Default)]
pub struct Observer {
    /// What this tick said, for the event log (cleared at each tick).
    pub notes: Vec<Note>,
    devices: BTreeMap<String, DeviceStatus>,
    mqtt: Option<MqttStats>,
    rack_fresh: Vec<Option<bool>>,
    cdu_fresh: Vec<Option<bool>>,
    mode: Option<String>,
    /// Counts so far.
    pub counts: ObservedCounts,
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Critical => "critical",
    }
}

impl Observer {
    /// Count the energy plans the policy made this tick, and keep where its write allowance
    /// stands.
    pub fn observe_plans(&mut self, plans: &[coolplane_policies::EnergyPlan]) {
        for p in plans {
            let status = match p.status.as_str() {
                "optimised" => "optimised",
                "fallback" => "fallback",
                _ => "other",
            };
            *self.counts.plans.entry(status).or_default() += 1;
            if let Some(a) = p.write_allowance {
                self.counts.allowance_refused += u64::from(a.refused_candidates);
                self.counts.write_allowance = Some(a);
            }
        }
    }

    /// Log and count one tick.
    pub fn observe(
        &mut self,
        snap: &Snapshot,
        devices: &[(String, DeviceStatus)],
        mqtt: Option<&MqttStats>,
        events: &[ControllerEvent],
        refused: &[String],
        writes_queued: usize,
    ) {
        self.counts.ticks += 1;
        self.notes.clear();
        let t_s = snap.t_s;
        let mut note = |severity: &'static str, text: String| self.notes.push(Note { t_s, severity, text });
        self.counts.writes_queued += writes_queued as u64;
        for (name, st) in devices {
            let prev = self.devices.get(name).cloned().unwrap_or_default();
            let d_tr = st.transport_errors.saturating_sub(prev.transport_errors);
            let d_to = st.timeouts.saturating_sub(prev.timeouts);
            let d_ex = st.exceptions.saturating_sub(prev.exceptions);
            let d_wf = st.write_failures.saturating_sub(prev.write_failures);
            if d_tr + d_to + d_ex + d_wf > 0 {
                tracing::warn!(
                    device = %name,
                    transport_errors = d_tr,
                    timeouts = d_to,
                    exceptions = d_ex,
                    write_failures = d_wf,
                    consecutive_failures = st.consecutive_failures,
                    error = st.last_error.as_deref().unwrap_or(""),
                    "device error"
                );
                note(
                    "warning",
                    format!(
                        "device {name}: error: {}",
                        st.last_error.as_deref().unwrap_or("(none given)")
                    ),
                );
            }
            if prev.connected && !st.connected {
                self.counts.device_disconnects += 1;
                tracing::warn!(device = %name, error = st.last_error.as_deref().unwrap_or(""), "device link lost");
                note("warning", format!("device {name}: link lost"));
            } else if !prev.connected && st.connected {
                tracing::info!(device = %name, "device connected");
                note("info", format!("device {name}: connected"));
            }
            self.devices.insert(name.clone(), st.clone());
        }
        if let Some(m) = mqtt {
            let prev = self.mqtt.clone().unwrap_or_default();
            for (reason, n) in &m.rejected {
                let d = n.saturating_sub(prev.rejected.get(reason).copied().unwrap_or(0));
                if d > 0 {
                    tracing::warn!(
                        reason = %reason,
                        count = d,
                        last = m.last_rejection.as_deref().unwrap_or(""),
                        "telemetry message rejected"
                    );
                    note("warning", format!("{d} telemetry message(s) rejected: {reason}"));
                }
            }
            let d = m.dropped_queue_full.saturating_sub(prev.dropped_queue_full);
            if d > 0 {
                tracing::warn!(count = d, "telemetry dropped: queue full");
            }
            let d = m.unknown_rack.saturating_sub(prev.unknown_rack);
            if d > 0 {
                tracing::warn!(count = d, "telemetry on a topic that names no known rack");
            }
            let d = m.commands_refused.saturating_sub(prev.commands_refused);
            if d > 0 {
                tracing::warn!(count = d, "power-limit commands refused: client queue full");
            }
            if prev.connected && !m.connected {
                tracing::warn!("MQTT broker link lost");
                note("warning", "MQTT broker link lost".into());
            } else if !prev.connected && m.connected {
                tracing::info!(connects = m.connects, "MQTT broker connected");
                note("info", "MQTT broker connected".into());
            }
            self.mqtt = Some(m.clone());
        }
        for r in refused {
            self.counts.writes_refused += 1;
            tracing::warn!(reason = %r, "write refused");
            note("warning", format!("write refused: {r}"));
        }
        for e in events {
            let sev = severity_name(e.severity);
            *self.counts.controller_events.entry(sev).or_default() += 1;
            match e.severity {
                Severity::Info => tracing::info!(t_s = e.t_s, severity = sev, "controller: {}", e.message),
                Severity::Warning => tracing::warn!(t_s = e.t_s, severity = sev, "controller: {}", e.message),
                Severity::Critical => tracing::error!(t_s = e.t_s, severity = sev, "controller: {}", e.message),
            }
            note(sev, e.message.clone());
        }
        if self.mode.as_deref() != Some(snap.mode.as_str()) {
            if let Some(old) = &self.mode {
                tracing::warn!(from = %old, to = %snap.mode, "controller mode changed");
                // The controller says so itself in its events (with the reason); one line, not two.
                if !events.iter().any(|e| e.message.starts_with("mode ")) {
                    note("warning", format!("mode {old} → {}", snap.mode));
                }
            } else {
                tracing::info!(mode = %snap.mode, "controller mode");
            }
            self.mode = Some(snap.mode.clone());
        }
        let racks: Vec<(&str, bool)> = snap.racks.iter().map(|r| (r.name.as_str(), r.fresh)).collect();
        transitions(
            "rack",
            &racks,
            &mut self.rack_fresh,
            &mut self.counts,
            &mut self.notes,
            snap.t_s,
        );
        let cdus: Vec<(&str, bool)> = snap.cdus.iter().map(|c| (c.name.as_str(), c.fresh)).collect();
        transitions(
            "cdu",
            &cdus,
            &mut self.cdu_fresh,
            &mut self.counts,
            &mut self.notes,
            snap.t_s,
        );
    }
}

/// Log fresh ↔ stale transitions; many at once (a broker gone) are summarised in one line.
fn transitions(
    kind: &'static str,
    now: &[(&str, bool)],
    prev: &mut Vec<Option<bool>>,
    counts: &mut ObservedCounts,
    notes: &mut Vec<Note>,
    t_s: f64,
) {
    prev.resize(now.len(), None);
    let mut went_stale = Vec::new();
    let mut went_fresh = Vec::new();
    for (i, (name, fresh)) in now.iter().enumerate() {
        match prev[i] {
            Some(true) if !fresh => went_stale.push(*name),
            Some(false) if *fresh => went_fresh.push(*name),
            _ => {}
        }
        prev[i] = Some(*fresh);
    }
    for (dir, list) in [("stale", &went_stale), ("fresh", &went_fresh)] {
        if list.is_empty() {
            continue;
        }
        *counts.stale_transitions.entry((kind, dir)).or_default() += list.len() as u64;
        let shown: Vec<&str> = list.iter().take(8).copied().collect();
        let more = list.len().saturating_sub(shown.len());
        if dir == "stale" {
            tracing::warn!(kind, count = list.len(), t_s, names = ?shown, more, "telemetry went stale");
        } else {
            tracing::info!(kind, count = list.len(), t_s, names = ?shown, more, "telemetry fresh again");
        }
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        notes.push(Note {
            t_s,
            severity: if dir == "stale" { "warning" } else { "info" },
            text: format!("{kind} telemetry {dir}: {}{tail}", shown.join(", ")),
        });
    }
}

#[derive(Debug, Default)]
struct Inner {
    snap: Option<Snapshot>,
    devices: Vec<(String, DeviceStatus)>,
    mqtt: Option<MqttStats>,
    counts: ObservedCounts,
    history: Option<HistoryStats>,
    tick_seconds: f64,
}

/// The daemon's metrics registry (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct DaemonMetrics {
    inner: Arc<Mutex<Inner>>,
}

/// Escape a label value for the text exposition format.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

struct Out {
    s: String,
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str, rows: &[(String, f64)]) {
        let _ = writeln!(self.s, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in rows {
            let v = if v.is_nan() {
                "NaN".to_string()
            } else if v.is_infinite() {
                if *v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
            } else {
                format!("{v}")
            };
            let _ = writeln!(self.s, "{name}{labels} {v}");
        }
    }
    fn one(&mut self, name: &str, kind: &str, help: &str, v: Option<f64>) {
        let rows: Vec<(String, f64)> = v.into_iter().map(|v| (String::new(), v)).collect();
        self.family(name, kind, help, &rows);
    }
}

impl DaemonMetrics {
    /// Record one tick.
    pub fn update(
        &self,
        snap: &Snapshot,
        devices: Vec<(String, DeviceStatus)>,
        mqtt: Option<MqttStats>,
        counts: &ObservedCounts,
        tick_seconds: f64,
    ) {
        if let Ok(mut i) = self.inner.lock() {
            i.snap = Some(snap.clone());
            i.devices = devices;
            i.mqtt = mqtt;
            i.counts = counts.clone();
            i.tick_seconds = tick_seconds;
        }
    }

    /// Record the history writer's counters.
    pub fn set_history(&self, h: HistoryStats) {
        if let Ok(mut i) = self.inner.lock() {
            i.history = Some(h);
        }
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Option<Snapshot> {
        self.inner.lock().ok().and_then(|i| i.snap.clone())
    }

    /// Render in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let i = match self.inner.lock() {
            Ok(i) => i,
            Err(e) => e.into_inner(),
        };
        let mut o = Out { s: String::new() };
        let c = &i.counts;
        o.one(
            "coolplane_ticks_total",
            "counter",
            "Controller ticks run.",
            Some(c.ticks as f64),
        );
        o.one(
            "coolplane_tick_duration_seconds",
            "gauge",
            "Wall-clock time the last tick took (image, controller, ledger, actions).",
            Some(i.tick_seconds),
        );
        o.one(
            "coolplane_setpoint_writes_total",
            "counter",
            "Setpoint writes queued to devices.",
            Some(c.writes_queued as f64),
        );
        o.one(
            "coolplane_writes_refused_total",
            "counter",
            "Writes the adapters refused (unknown or read-only point, queue full, no device).",
            Some(c.writes_refused as f64),
        );
        o.one(
            "coolplane_power_limits_resent_total",
            "counter",
            "Rack power-limit commands sent again: fresh telemetry showed the last one not in force (lost in a broker or agent outage).",
            Some(c.power_limits_resent as f64),
        );
        let plans: Vec<(String, f64)> = ["optimised", "fallback", "other"]
            .iter()
            .map(|s| {
                (
                    format!("{{status=\"{s}\"}}"),
                    c.plans.get(s).copied().unwrap_or(0) as f64,
                )
            })
            .collect();
        o.family(
            "coolplane_energy_plans_total",
            "counter",
            "Energy plans the policy made, by status (fallback: trim-respond stands in).",
            &plans,
        );
        o.one(
            "coolplane_write_allowance_refused_candidates_total",
            "counter",
            "Candidate moves the weekly write allowance refused (each needed more than half of the writes left).",
            Some(c.allowance_refused as f64),
        );
        // An allowance's samples by kind: the allowance, the writes used, what is left.
        let pool = |allowance: u32, used: u32, left: u32| -> Vec<(String, f64)> {
            [("allowance", allowance), ("used", used), ("left", left)]
                .map(|(k, v)| (format!("{{kind=\"{k}\"}}"), f64::from(v)))
                .to_vec()
        };
        let wa = c
            .write_allowance
            .map_or_else(Vec::new, |a| pool(a.allowance, a.used, a.left));
        o.one(
            "coolplane_write_allowance_settling",
            "gauge",
            "1 while the policy's plans fall in the settling day after its learning day (their moves are outside the write allowance, which starts after it), else 0.",
            c.write_allowance.map(|a| f64::from(u8::from(a.settling))),
        );
        o.family(
            "coolplane_write_allowance_writes",
            "gauge",
            "The policy's weekly setpoint-write allowance after its last plan: the allowance, the writes its moves took in the last 7 days, and what is left (the CDUs' writes only where the facility water systems have an allowance of their own).",
            &wa,
        );
        let fa = c
            .write_allowance
            .and_then(|a| a.facility)
            .map_or_else(Vec::new, |f| pool(f.allowance, f.used, f.left));
        o.family(
            "coolplane_write_allowance_facility_writes",
            "gauge",
            "Where the policy's write allowance is split: the facility water systems' own (setpoint and heat-rejection mode writes) after its last plan: the allowance, the writes its moves took in the last 7 days, and what is left.",
            &fa,
        );
        let ev: Vec<(String, f64)> = ["info", "warning", "critical"]
            .iter()
            .map(|s| {
                (
                    format!("{{severity=\"{s}\"}}"),
                    c.controller_events.get(s).copied().unwrap_or(0) as f64,
                )
            })
            .collect();
        o.family(
            "coolplane_controller_events_total",
            "counter",
            "Controller events by severity.",
            &ev,
        );
        let st: Vec<(String, f64)> = ["rack", "cdu"]
            .iter()
            .flat_map(|k| ["stale", "fresh"].iter().map(move |d| (*k, *d)))
            .map(|(k, d)| {
                (
                    format!("{{kind=\"{k}\",to=\"{d}\"}}"),
                    c.stale_transitions.get(&(k, d)).copied().unwrap_or(0) as f64,
                )
            })
            .collect();
        o.family(
            "coolplane_stale_transitions_total",
            "counter",
            "Telemetry freshness transitions by kind and direction.",
            &st,
        );
        if let Some(s) = &i.snap {
            let modes: Vec<(String, f64)> = ["Auto", "Manual", "Safe"]
                .iter()
                .map(|m| {
                    (
                        format!("{{mode=\"{}\"}}", m.to_lowercase()),
                        if s.mode == *m { 1.0 } else { 0.0 },
                    )
                })
                .collect();
            o.family(
                "coolplane_controller_mode",
                "gauge",
                "1 for the controller's mode now.",
                &modes,
            );
            let site = format!("{{site=\"{}\"}}", esc(&s.site.name));
            let opt = |v: Option<f64>| -> Vec<(String, f64)> { v.map(|v| (site.clone(), v)).into_iter().collect() };
            o.family(
                "coolplane_site_pue",
                "gauge",
                "Utility meter over IT power, now.",
                &opt(s.site.pue),
            );
            let kw = |v: Option<f64>| v.map(|v| v * 1000.0);
            let parts: Vec<(String, f64)> = [
                ("facility", s.site.facility_kw),
                ("it", s.site.it_kw),
                ("cooling", s.site.cooling_kw),
                ("heat_pump", s.site.heat_pump_kw),
                ("loss", s.site.loss_kw),
            ]
            .iter()
            .filter_map(|(p, v)| v.map(|v| (format!("{{site=\"{}\",part=\"{p}\"}}", esc(&s.site.name)), v * 1000.0)))
            .collect();
            o.family(
                "coolplane_site_power_watts",
                "gauge",
                "Site power by part: facility (utility meter), IT, cooling, heat-reuse heat pumps (where reported), losses and the rest.",
                &parts,
            );
            o.family(
                "coolplane_site_budget_watts",
                "gauge",
                "Site power budget in force.",
                &opt(kw(s.site.budget_kw)),
            );
            o.family(
                "coolplane_site_headroom_watts",
                "gauge",
                "Site budget minus facility power.",
                &opt(kw(s.site.headroom_kw)),
            );
            o.family(
                "coolplane_gpu_hottest_celsius",
                "gauge",
                "Hottest GPU die reported by fresh racks.",
                &opt(s.site.hottest_gpu_c),
            );
            o.family(
                "coolplane_gpu_slowdown_celsius",
                "gauge",
                "GPU slowdown limit.",
                &opt(Some(s.site.slowdown_c)),
            );
            o.family(
                "coolplane_gpu_margin_min_kelvin",
                "gauge",
                "Smallest GPU margin to slowdown.",
                &opt(s.site.hottest_margin_k),
            );
            o.family(
                "coolplane_racks_fresh",
                "gauge",
                "Racks whose telemetry is fresh.",
                &opt(Some(s.site.racks_fresh as f64)),
            );
            o.family(
                "coolplane_racks",
                "gauge",
                "Racks in the site.",
                &opt(Some(s.site.racks as f64)),
            );
            let per_cdu = |f: &dyn Fn(&crate::snapshot::CduState) -> Option<f64>| -> Vec<(String, f64)> {
                s.cdus
                    .iter()
                    .filter_map(|c| {
                        f(c).map(|v| (format!("{{cdu=\"{}\",hall=\"{}\"}}", esc(&c.name), esc(&c.hall)), v))
                    })
                    .collect()
            };
            o.family(
                "coolplane_cdu_supply_celsius",
                "gauge",
                "CDU secondary supply temperature.",
                &per_cdu(&|c| c.supply_c),
            );
            o.family(
                "coolplane_cdu_return_celsius",
                "gauge",
                "CDU secondary return temperature.",
                &per_cdu(&|c| c.return_c),
            );
            o.family(
                "coolplane_cdu_flow_lpm",
                "gauge",
                "CDU secondary flow, litres per minute.",
                &per_cdu(&|c| c.flow_lpm),
            );
            o.family(
                "coolplane_cdu_fresh",
                "gauge",
                "1 while the CDU's readings are fresh.",
                &per_cdu(&|c| Some(if c.fresh { 1.0 } else { 0.0 })),
            );
            o.family(
                "coolplane_cdu_reading_age_seconds",
                "gauge",
                "Age of the CDU's newest reading, plant seconds.",
                &per_cdu(&|c| c.age_s),
            );
        }
        let dev = |f: &dyn Fn(&DeviceStatus) -> f64| -> Vec<(String, f64)> {
            i.devices
                .iter()
                .map(|(n, d)| (format!("{{device=\"{}\"}}", esc(n)), f(d)))
                .collect()
        };
        o.family(
            "coolplane_device_up",
            "gauge",
            "1 while the Modbus device is connected and its last poll succeeded.",
            &dev(&|d| {
                if d.connected && d.consecutive_failures == 0 {
                    1.0
                } else {
                    0.0
                }
            }),
        );
        o.family(
            "coolplane_device_consecutive_failures",
            "gauge",
            "Failed polls or connects in a row.",
            &dev(&|d| d.consecutive_failures as f64),
        );
        o.family(
            "coolplane_device_polls_total",
            "counter",
            "Complete poll cycles.",
            &dev(&|d| d.polls as f64),
        );
        let _ = writeln!(
            o.s,
            "# HELP coolplane_device_poll_duration_seconds Wall-clock time of complete poll cycles.\n# TYPE coolplane_device_poll_duration_seconds summary"
        );
        for (n, d) in &i.devices {
            let _ = writeln!(
                o.s,
                "coolplane_device_poll_duration_seconds_sum{{device=\"{}\"}} {}\ncoolplane_device_poll_duration_seconds_count{{device=\"{}\"}} {}",
                esc(n),
                d.poll_seconds_sum,
                esc(n),
                d.polls
            );
        }
        o.family(
            "coolplane_device_last_poll_seconds",
            "gauge",
            "Wall-clock time of the last complete poll cycle.",
            &dev(&|d| d.last_poll_s),
        );
        let errs: Vec<(String, f64)> = i
            .devices
            .iter()
            .flat_map(|(n, d)| {
                [
                    ("transport", d.transport_errors),
                    ("timeout", d.timeouts),
                    ("exception", d.exceptions),
                    ("write_failure", d.write_failures),
                ]
                .map(|(k, v)| (format!("{{device=\"{}\",kind=\"{k}\"}}", esc(n)), v as f64))
            })
            .collect();
        o.family(
            "coolplane_device_errors_total",
            "counter",
            "Device errors by kind: transport, timeout, Modbus exception, write not confirmed.",
            &errs,
        );
        o.family(
            "coolplane_device_writes_total",
            "counter",
            "Register writes sent to the device.",
            &dev(&|d| d.writes as f64),
        );
        if let Some(m) = &i.mqtt {
            o.one(
                "coolplane_mqtt_connected",
                "gauge",
                "1 while the broker link is up.",
                Some(if m.connected { 1.0 } else { 0.0 }),
            );
            o.one(
                "coolplane_mqtt_connects_total",
                "counter",
                "Broker ConnAcks.",
                Some(m.connects as f64),
            );
            o.one(
                "coolplane_mqtt_messages_accepted_total",
                "counter",
                "Rack telemetry messages accepted.",
                Some(m.accepted as f64),
            );
            let mut rej: Vec<(String, f64)> = m
                .rejected
                .iter()
                .map(|(r, n)| (format!("{{reason=\"{}\"}}", esc(r)), *n as f64))
                .collect();
            rej.push(("{reason=\"unknown_rack\"}".into(), m.unknown_rack as f64));
            rej.push(("{reason=\"queue_full\"}".into(), m.dropped_queue_full as f64));
            o.family(
                "coolplane_mqtt_messages_rejected_total",
                "counter",
                "Rack telemetry messages rejected or dropped, by reason.",
                &rej,
            );
            o.one(
                "coolplane_mqtt_commands_sent_total",
                "counter",
                "Power-limit commands published.",
                Some(m.commands_sent as f64),
            );
            o.one(
                "coolplane_mqtt_commands_refused_total",
                "counter",
                "Power-limit commands refused (client queue full).",
                Some(m.commands_refused as f64),
            );
        }
        if let Some(h) = &i.history {
            o.one(
                "coolplane_history_points_written_total",
                "counter",
                "History points the database acknowledged.",
                Some(h.points_written as f64),
            );
            o.one(
                "coolplane_history_points_dropped_total",
                "counter",
                "History points dropped (buffers full, malformed).",
                Some(h.points_dropped as f64),
            );
            o.one(
                "coolplane_history_write_errors_total",
                "counter",
                "History write requests that failed and are retried.",
                Some(h.write_errors as f64),
            );
            o.one(
                "coolplane_history_points_buffered",
                "gauge",
                "History points waiting in memory.",
                Some(h.points_buffered as f64),
            );
            o.one(
                "coolplane_history_points_spilled",
                "gauge",
                "History points waiting on disk.",
                Some(h.points_spilled as f64),
            );
            o.one(
                "coolplane_history_healthy",
                "gauge",
                "1 while the last history write succeeded.",
                Some(if h.healthy { 1.0 } else { 0.0 }),
            );
        }
        o.s
    }
}

#[cfg(test)]
mod tests;
