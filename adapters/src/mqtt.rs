//! MQTT client (rumqttc): rack telemetry in, power-limit commands out.
//!
//! - The event loop is polled continuously by one task; nothing else ever awaits on it, and that
//!   task never awaits a publish or a subscribe (it uses the non-blocking `try_` calls).
//! - rumqttc has no reconnect back-off of its own: after a connection error the task waits,
//!   doubling from `backoff_initial` up to `backoff_max`, then polls again (which reconnects).
//! - Subscriptions are renewed on every ConnAck (a clean session loses them).
//! - Incoming telemetry goes through a bounded queue; when it is full the oldest message is
//!   dropped (telemetry is superseded by the next message anyway) and counted.
//! - A malformed payload is rejected with its reason logged and counted per reason, never a crash;
//!   retained telemetry is accepted, retained commands are never sent.
//! - Credentials (username/password) and TLS (rustls with the `ring` provider, a CA file) are
//!   optional ([`MqttConfig::auth`]); other subscriptions (operator commands, Home Assistant's
//!   status) go to a second bounded inbox ([`MqttLink::drain_control`]), never to the telemetry
//!   parser.

use crate::clock::Clock;
use crate::mqtt_auth::MqttAuth;
use crate::telemetry::{
    encode_power_limit_command, parse_rack_telemetry, PowerLimitCommand, RackTelemetry, RackTopic, Topics,
};
use rumqttc::{AsyncClient, Event, LastWill, MqttOptions, Packet, QoS};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Broker and client settings.
#[derive(Debug, Clone)]
pub struct MqttConfig {
    /// Broker host.
    pub host: String,
    /// Broker port.
    pub port: u16,
    /// Client id (unique per broker).
    pub client_id: String,
    /// Site name (topic root `coolplane/v1/{site}`).
    pub site: String,
    /// Rack names in topology order.
    pub racks: Vec<String>,
    /// GPUs per rack, in topology order.
    pub gpus_per_rack: Vec<usize>,
    /// GPU slowdown temperature, to convert margins to absolute temperatures, °C.
    pub slowdown_c: f32,
    /// Capacity of the telemetry queue (oldest dropped when full).
    pub queue_capacity: usize,
    /// First reconnect back-off.
    pub backoff_initial: Duration,
    /// Longest reconnect back-off.
    pub backoff_max: Duration,
    /// Keep-alive.
    pub keep_alive: Duration,
    /// Credentials and TLS (default: anonymous, plain TCP).
    pub auth: MqttAuth,
    /// Further subscriptions (operator commands, `homeassistant/status`): their messages go to the
    /// control inbox ([`MqttLink::drain_control`]).
    pub control_filters: Vec<String>,
    /// Capacity of the control inbox (oldest dropped and counted when full).
    pub control_capacity: usize,
}

impl MqttConfig {
    /// Defaults: queue of 4 × racks messages, back-off 0.5 s doubling to 30 s, keep-alive 15 s.
    pub fn new(
        host: &str,
        port: u16,
        client_id: &str,
        site: &str,
        racks: Vec<String>,
        gpus_per_rack: Vec<usize>,
        slowdown_c: f32,
    ) -> Self {
        let q = (racks.len() * 4).max(64);
        Self {
            host: host.to_string(),
            port,
            client_id: client_id.to_string(),
            site: site.to_string(),
            racks,
            gpus_per_rack,
            slowdown_c,
            queue_capacity: q,
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            keep_alive: Duration::from_secs(15),
            auth: MqttAuth::default(),
            control_filters: Vec::new(),
            control_capacity: 1024,
        }
    }
}

/// A message on one of [`MqttConfig::control_filters`].
#[derive(Debug, Clone, PartialEq)]
pub struct ControlMessage {
    /// Topic.
    pub topic: String,
    /// Payload.
    pub payload: Vec<u8>,
    /// The broker delivered it as a retained message (a command replayed, not sent now).
    pub retain: bool,
}

/// Counters of the MQTT link.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MqttStats {
    /// Connected now.
    pub connected: bool,
    /// ConnAcks received (1 + reconnects).
    pub connects: u64,
    /// Connection errors.
    pub connection_errors: u64,
    /// Telemetry messages accepted.
    pub accepted: u64,
    /// Telemetry messages dropped because the queue was full.
    pub dropped_queue_full: u64,
    /// Rejected messages per reason.
    pub rejected: BTreeMap<String, u64>,
    /// Messages on topics that name no known rack.
    pub unknown_rack: u64,
    /// Power-limit commands published.
    pub commands_sent: u64,
    /// Power-limit commands refused (client queue full).
    pub commands_refused: u64,
    /// Last rejection, for operators.
    pub last_rejection: Option<String>,
    /// Control messages (commands, Home Assistant status) received.
    pub control_received: u64,
    /// Control messages dropped because the control inbox was full.
    pub control_dropped: u64,
    /// Dashboard and result messages published.
    pub published: u64,
    /// Dashboard and result messages refused (client queue full).
    pub publish_refused: u64,
}

/// Latest telemetry of one rack with its receive time (plant time, s).
#[derive(Debug, Clone)]
pub struct RackSample {
    /// Parsed telemetry.
    pub telemetry: RackTelemetry,
    /// When it arrived, s of plant time.
    pub received_s: f64,
}

struct State {
    latest: Vec<Option<RackSample>>,
    stats: MqttStats,
    queue: VecDeque<(String, Vec<u8>)>,
    control: VecDeque<ControlMessage>,
}

/// Handle to the running MQTT link.
pub struct MqttLink {
    client: AsyncClient,
    topics: Topics,
    state: Arc<Mutex<State>>,
    tasks: Vec<JoinHandle<()>>,
    next_request: std::sync::atomic::AtomicU64,
}

impl MqttLink {
    /// Connect (in the background) and start ingesting rack telemetry.
    pub fn start(cfg: MqttConfig, clock: Clock) -> Self {
        let topics = Topics::new(&cfg.site);
        let mut opts = MqttOptions::new(cfg.client_id.clone(), cfg.host.clone(), cfg.port);
        opts.set_keep_alive(cfg.keep_alive);
        opts.set_clean_session(true);
        opts.set_max_packet_size(4 * 1024 * 1024, 4 * 1024 * 1024);
        opts.set_last_will(LastWill::new(topics.status(), "offline", QoS::AtLeastOnce, true));
        cfg.auth.apply(&mut opts);
        // Room for one tick of dashboard state (a message per rack, CDU, hall) beside the power limits.
        let (client, mut eventloop) = AsyncClient::new(opts, (cfg.racks.len() * 4).max(256));
        let state = Arc::new(Mutex::new(State {
            latest: vec![None; cfg.racks.len()],
            stats: MqttStats::default(),
            queue: VecDeque::new(),
            control: VecDeque::new(),
        }));
        let notify = Arc::new(Notify::new());
        let rack_index: HashMap<String, usize> = cfg.racks.iter().enumerate().map(|(i, r)| (r.clone(), i)).collect();
        // Network task: polls the event loop and nothing else.
        let net = {
            let state = state.clone();
            let notify = notify.clone();
            let client = client.clone();
            let topics = topics.clone();
            let cfg = cfg.clone();
            tokio::spawn(async move {
                let mut backoff = cfg.backoff_initial;
                loop {
                    match eventloop.poll().await {
                        Ok(Event::Incoming(Packet::ConnAck(_))) => {
                            backoff = cfg.backoff_initial;
                            let _ = client.try_subscribe(topics.rack_telemetry_filter(), QoS::AtMostOnce);
                            for f in &cfg.control_filters {
                                let _ = client.try_subscribe(f.clone(), QoS::AtLeastOnce);
                            }
                            let _ = client.try_publish(topics.status(), QoS::AtLeastOnce, true, "online");
                            if let Ok(mut s) = state.lock() {
                                s.stats.connected = true;
                                s.stats.connects += 1;
                            }
                        }
                        Ok(Event::Incoming(Packet::Publish(p)))
                            if !matches!(topics.rack_topic(&p.topic), Some((_, RackTopic::Telemetry))) =>
                        {
                            if let Ok(mut s) = state.lock() {
                                s.stats.control_received += 1;
                                if s.control.len() >= cfg.control_capacity {
                                    s.control.pop_front();
                                    s.stats.control_dropped += 1;
                                }
                                s.control.push_back(ControlMessage {
                                    topic: p.topic.clone(),
                                    payload: p.payload.to_vec(),
                                    retain: p.retain,
                                });
                            }
                        }
                        Ok(Event::Incoming(Packet::Publish(p))) => {
                            if let Ok(mut s) = state.lock() {
                                if s.queue.len() >= cfg.queue_capacity {
                                    s.queue.pop_front();
                                    s.stats.dropped_queue_full += 1;
                                }
                                s.queue.push_back((p.topic.clone(), p.payload.to_vec()));
                            }
                            notify.notify_one();
                        }
                        Ok(_) => {}
                        Err(e) => {
                            if let Ok(mut s) = state.lock() {
                                s.stats.connected = false;
                                s.stats.connection_errors += 1;
                                s.stats.last_rejection = Some(format!("connection: {e}"));
                            }
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(cfg.backoff_max);
                        }
                    }
                }
            })
        };
        // Decoder task: parses queued telemetry into the latest-per-rack table.
        let dec = {
            let state = state.clone();
            let topics = topics.clone();
            tokio::spawn(async move {
                loop {
                    notify.notified().await;
                    loop {
                        let next = state.lock().ok().and_then(|mut s| s.queue.pop_front());
                        let Some((topic, payload)) = next else { break };
                        let Some(rack) = topics.rack_of(&topic).map(str::to_string) else {
                            if let Ok(mut s) = state.lock() {
                                s.stats.unknown_rack += 1;
                            }
                            continue;
                        };
                        let Some(&r) = rack_index.get(&rack) else {
                            if let Ok(mut s) = state.lock() {
                                s.stats.unknown_rack += 1;
                            }
                            continue;
                        };
                        let parsed = parse_rack_telemetry(&payload, cfg.gpus_per_rack[r], cfg.slowdown_c);
                        let now = clock.now_s();
                        if let Ok(mut s) = state.lock() {
                            match parsed {
                                Ok(t) => {
                                    s.stats.accepted += 1;
                                    s.latest[r] = Some(RackSample {
                                        telemetry: t,
                                        received_s: now,
                                    });
                                }
                                Err(e) => {
                                    let n = s.stats.rejected.entry(e.reason().to_string()).or_insert(0);
                                    *n += 1;
                                    let msg = format!("{topic}: {e}");
                                    // Logged with its reason; a flood is logged at 1, 2, 4, 8, … per reason.
                                    if n.is_power_of_two() {
                                        eprintln!(
                                            "coolplane: rejected MQTT message ({} so far for `{}`) {msg}",
                                            n,
                                            e.reason()
                                        );
                                    }
                                    s.stats.last_rejection = Some(msg);
                                }
                            }
                        }
                    }
                }
            })
        };
        Self {
            client,
            topics,
            state,
            tasks: vec![net, dec],
            next_request: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// Topic layout in use.
    pub fn topics(&self) -> &Topics {
        &self.topics
    }

    /// The client, for publishing dashboards or tests.
    pub fn client(&self) -> &AsyncClient {
        &self.client
    }

    /// Latest telemetry of every rack (topology order).
    pub fn latest(&self) -> Vec<Option<RackSample>> {
        self.state.lock().map(|s| s.latest.clone()).unwrap_or_default()
    }

    /// Run `f` on the latest telemetry without copying it.
    pub fn with_latest<R>(&self, f: impl FnOnce(&[Option<RackSample>]) -> R) -> Option<R> {
        self.state.lock().ok().map(|s| f(&s.latest))
    }

    /// Counters.
    pub fn stats(&self) -> MqttStats {
        self.state.lock().map(|s| s.stats.clone()).unwrap_or_default()
    }

    /// Take the control messages (commands, Home Assistant status) received since the last call.
    pub fn drain_control(&self) -> Vec<ControlMessage> {
        self.state
            .lock()
            .map(|mut s| s.control.drain(..).collect())
            .unwrap_or_default()
    }

    /// Publish a dashboard message (QoS 1; refused and counted, never awaited, when the client's
    /// request queue is full).
    pub fn publish(&self, topic: String, payload: Vec<u8>, retain: bool) -> bool {
        let ok = self
            .client
            .try_publish(topic, QoS::AtLeastOnce, retain, payload)
            .is_ok();
        if let Ok(mut s) = self.state.lock() {
            if ok {
                s.stats.published += 1;
            } else {
                s.stats.publish_refused += 1;
            }
        }
        ok
    }

    /// Publish new power limits for a rack (not retained; refused, not queued, when the client's
    /// request queue is full).
    pub fn send_power_limits(&self, rack: &str, limits_w: Vec<f32>, ts_unix_ms: i64) -> bool {
        let id = self.next_request.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cmd = PowerLimitCommand {
            request_id: format!("{}-{id}", rack),
            limits_w,
            ts_unix_ms,
        };
        let ok = self
            .client
            .try_publish(
                self.topics.power_limit_set(rack),
                QoS::AtLeastOnce,
                false,
                encode_power_limit_command(&cmd),
            )
            .is_ok();
        if let Ok(mut s) = self.state.lock() {
            if ok {
                s.stats.commands_sent += 1;
            } else {
                s.stats.commands_refused += 1;
            }
        }
        ok
    }
}

impl Drop for MqttLink {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
