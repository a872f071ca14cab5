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
//! - Message size: rumqttc drops the whole connection on a packet over its incoming limit (and
//!   a retained one comes back on every reconnect, so one oversize message on one rack's topic
//!   would cut off every rack). The link therefore takes packets up to MQTT's own largest size
//!   ([`MQTT_MAX_PACKET_BYTES`], one packet in memory at a time; cap it at the broker, e.g.
//!   Mosquitto's `message_size_limit`) and rejects telemetry over
//!   [`MAX_PAYLOAD_BYTES`](crate::telemetry::MAX_PAYLOAD_BYTES) as a counted, logged `too_large`
//!   rejection before it is queued; the link stays up and the other racks stay fresh. A packet the
//!   client still cannot take (a configured lower limit) is counted as `packet_too_large` and
//!   logged with the connection error.
//! - A message whose `rack` differs from its topic's rack is rejected (`rack_mismatch`); its time
//!   stamp is checked against the wall clock: more than `max_clock_skew` (30 s) ahead is
//!   `timestamp_future`, older than `max_age` (300 s) is `timestamp_old` (a retained message of a
//!   rack that is gone never makes it look alive); an accepted message's sample time is its
//!   arrival less its age, so freshness counts from when it was sampled.
//! - Credentials (username/password) and TLS (rustls with the `ring` provider, a CA file) are
//!   optional ([`MqttConfig::auth`]); other subscriptions (operator commands, Home Assistant's
//!   status) go to a second bounded inbox ([`MqttLink::drain_control`]), never to the telemetry
//!   parser.

use crate::clock::Clock;
use crate::mqtt_auth::MqttAuth;
use crate::telemetry::{
    encode_power_limit_command, parse_rack_telemetry, PowerLimitCommand, RackTelemetry, RackTopic, Topics,
    MAX_PAYLOAD_BYTES,
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
    /// Largest incoming MQTT packet the client reads, bytes (a larger one drops the connection
    /// in rumqttc). Default [`MQTT_MAX_PACKET_BYTES`], so that no message a broker can deliver
    /// breaks the link; oversize telemetry is rejected after it is read.
    pub max_packet_bytes: usize,
    /// A message stamped further in the future than this (wall clock) is rejected
    /// (`timestamp_future`): the sender's clock is wrong.
    pub max_clock_skew: Duration,
    /// A message stamped longer ago than this (wall clock) is rejected (`timestamp_old`): a
    /// retained message from a rack that is gone must not make it look alive.
    pub max_age: Duration,
    /// Credentials and TLS (default: anonymous, plain TCP).
    pub auth: MqttAuth,
    /// Further subscriptions (operator commands, `homeassistant/status`): their messages go to the
    /// control inbox ([`MqttLink::drain_control`]).
    pub control_filters: Vec<String>,
    /// Capacity of the control inbox (oldest dropped and counted when full).
    pub control_capacity: usize,
}

/// MQTT's largest packet (the remaining-length field's maximum, 256 MiB − 1).
pub const MQTT_MAX_PACKET_BYTES: usize = 268_435_455;

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
            max_packet_bytes: MQTT_MAX_PACKET_BYTES,
            max_clock_skew: Duration::from_secs(30),
            max_age: Duration::from_secs(300),
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

/// Latest telemetry of one rack with its sampling time (plant time, s).
#[derive(Debug, Clone)]
pub struct RackSample {
    /// Parsed telemetry.
    pub telemetry: RackTelemetry,
    /// When it was sampled, s of plant time: the arrival time less the message's age by its
    /// own time stamp (never later than the arrival), so that freshness counts from the sample.
    pub received_s: f64,
}

/// Check a message's time stamp against the wall clock (`now_unix_ms`): the message's age in
/// wall-clock seconds (0 for a stamp up to `max_clock_skew` ahead), or the rejection reason and
/// message.
pub fn check_timestamp(
    ts_unix_ms: i64,
    now_unix_ms: i64,
    max_clock_skew: Duration,
    max_age: Duration,
) -> Result<f64, (&'static str, String)> {
    let age_ms = now_unix_ms.saturating_sub(ts_unix_ms);
    if age_ms < -(max_clock_skew.as_millis() as i64) {
        return Err((
            "timestamp_future",
            format!(
                "time stamp is {:.1} s ahead of this clock (allowed skew {:.0} s)",
                -age_ms as f64 / 1000.0,
                max_clock_skew.as_secs_f64()
            ),
        ));
    }
    if age_ms > max_age.as_millis() as i64 {
        return Err((
            "timestamp_old",
            format!(
                "time stamp is {:.0} s old (older than {:.0} s: a stale or retained message)",
                age_ms as f64 / 1000.0,
                max_age.as_secs_f64()
            ),
        ));
    }
    Ok(age_ms.max(0) as f64 / 1000.0)
}

fn unix_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

struct State {
    latest: Vec<Option<RackSample>>,
    stats: MqttStats,
    queue: VecDeque<(String, Vec<u8>)>,
    control: VecDeque<ControlMessage>,
}

impl State {
    /// Count a rejected message under `reason` and log it; a flood is logged at 1, 2, 4, 8, …
    /// per reason.
    fn reject(&mut self, reason: &str, msg: String) {
        let n = self.stats.rejected.entry(reason.to_string()).or_insert(0);
        *n += 1;
        if n.is_power_of_two() {
            tracing::warn!(reason = %reason, so_far = *n, "rejected MQTT message: {msg}");
        }
        self.stats.last_rejection = Some(msg);
    }
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
        opts.set_max_packet_size(cfg.max_packet_bytes, 4 * 1024 * 1024);
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
                            if p.payload.len() > MAX_PAYLOAD_BYTES {
                                // Rejected before queueing: the queue never holds oversize payloads.
                                if let Ok(mut s) = state.lock() {
                                    let msg = format!(
                                        "{}: payload is {} bytes, larger than the {MAX_PAYLOAD_BYTES}-byte limit{}",
                                        p.topic,
                                        p.payload.len(),
                                        if p.retain { " (retained)" } else { "" }
                                    );
                                    s.reject("too_large", msg);
                                }
                                continue;
                            }
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
                                if let rumqttc::ConnectionError::MqttState(rumqttc::StateError::Deserialization(
                                    rumqttc::mqttbytes::Error::PayloadSizeLimitExceeded(n),
                                )) = &e
                                {
                                    let msg = format!(
                                        "incoming packet of {n} bytes is over the client's {}-byte limit: connection dropped",
                                        cfg.max_packet_bytes
                                    );
                                    s.reject("packet_too_large", msg);
                                } else {
                                    tracing::warn!(
                                        broker = %format!("{}:{}", cfg.host, cfg.port),
                                        error = %e,
                                        retry_in_ms = backoff.as_millis() as u64,
                                        "MQTT connection error"
                                    );
                                }
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
                                Ok(t) if t.rack != rack => {
                                    let msg =
                                        format!("{topic}: field `rack` = {:?} differs from the topic's rack", t.rack);
                                    s.reject("rack_mismatch", msg);
                                }
                                Ok(t) => {
                                    match check_timestamp(t.ts_unix_ms, unix_ms_now(), cfg.max_clock_skew, cfg.max_age)
                                    {
                                        Ok(age_s) => {
                                            s.stats.accepted += 1;
                                            s.latest[r] = Some(RackSample {
                                                telemetry: t,
                                                received_s: now - age_s * clock.speed(),
                                            });
                                        }
                                        Err((reason, why)) => s.reject(reason, format!("{topic}: field `ts`: {why}")),
                                    }
                                }
                                Err(e) => s.reject(e.reason(), format!("{topic}: {e}")),
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

#[cfg(test)]
mod tests {
    use super::check_timestamp;
    use std::time::Duration;

    #[test]
    fn time_stamps_are_checked_against_the_clock_with_a_stated_skew() {
        let now = 1_800_000_000_000;
        let (skew, age) = (Duration::from_secs(30), Duration::from_secs(300));
        assert_eq!(check_timestamp(now - 2_500, now, skew, age), Ok(2.5));
        assert_eq!(
            check_timestamp(now + 10_000, now, skew, age),
            Ok(0.0),
            "within the skew"
        );
        assert_eq!(
            check_timestamp(now + 31_000, now, skew, age).unwrap_err().0,
            "timestamp_future"
        );
        assert_eq!(
            check_timestamp(now - 301_000, now, skew, age).unwrap_err().0,
            "timestamp_old"
        );
        // A retained message from 1970.
        assert_eq!(check_timestamp(0, now, skew, age).unwrap_err().0, "timestamp_old");
        assert_eq!(
            check_timestamp(i64::MIN, now, skew, age).unwrap_err().0,
            "timestamp_old"
        );
        assert_eq!(
            check_timestamp(i64::MAX, now, skew, age).unwrap_err().0,
            "timestamp_future"
        );
    }
}
