//! Modbus TCP client for one device, driven by its register map.
//!
//! One task per device (one connection per device or gateway unit). Behaviour, after the known
//! pitfalls of `tokio-modbus` (its client has no timeout, and a late reply after a timeout
//! desynchronises a reused connection):
//! - every request runs under a timeout; on a transport error or a timeout the connection is
//!   dropped and reopened;
//! - while a device is failing, reconnects back off exponentially (per device), so one dead device
//!   never stalls the others;
//! - Modbus exception codes are answers of the device: counted apart from transport failures and
//!   they never drop the connection;
//! - a value that could not be read keeps its old time stamp (so its age grows) and is marked
//!   [`Quality::Bad`] after `stale_after_failures` failed polls; sentinels and non-finite floats
//!   are marked [`Quality::Uncertain`] with a NaN value;
//! - a reading outside its point's `min`/`max` in the map (the plausible range, e.g. a CDU
//!   answering 0x7FFE = 3,276.6 °C) is marked [`Quality::Bad`], counted
//!   ([`DeviceStatus::implausible`]) and logged;
//! - a gateway exception (0x0A path unavailable, 0x0B target device failed to respond: the unit
//!   id is wrong or the unit is gone) is a failure of the device, not an answer: counted with the
//!   transport errors, the values go bad, the link is reopened with back-off;
//! - device errors are logged when a device starts failing and when its values go bad;
//! - writes go out only when the value differs from the device's read-back by at least half a
//!   register step, and are read back to verify; the write queue is bounded (a full queue refuses
//!   the write: back-pressure on commands);
//! - writes waiting for the connection (during an outage) are held as the latest value per point,
//!   so the waiting set is bounded by the map's size and only the newest value of each point is
//!   sent after a reconnect; every superseded write is dropped, counted
//!   ([`DeviceStatus::writes_superseded`]) and logged.

use crate::clock::Clock;
use crate::regmap::{decode, encode, Decoded, ReadBlock, RegisterMap, Table};
use coolplane_core::signals::Quality;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};
use tokio_modbus::client::{tcp, Context, Reader, Writer};
use tokio_modbus::Slave;

/// How to reach and poll one device.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Device name (for logs and status).
    pub name: String,
    /// TCP address.
    pub addr: SocketAddr,
    /// Modbus unit id.
    pub unit: u8,
    /// Register map.
    pub map: Arc<RegisterMap>,
    /// Poll period, s of plant time.
    pub poll_interval_s: f64,
    /// Timeout of every connect and request (wall clock).
    pub timeout: Duration,
    /// Failed polls after which values are marked bad.
    pub stale_after_failures: u32,
    /// First reconnect back-off (wall clock).
    pub backoff_initial: Duration,
    /// Longest reconnect back-off (wall clock).
    pub backoff_max: Duration,
    /// Capacity of the write queue.
    pub write_queue: usize,
}

impl DeviceConfig {
    /// Defaults for a device at `addr` with `map`: 1 s timeout, bad after 3 failures, back-off
    /// 2 s doubling up to 5 min, 64 queued writes.
    pub fn new(name: &str, addr: SocketAddr, unit: u8, map: Arc<RegisterMap>, poll_interval_s: f64) -> Self {
        Self {
            name: name.to_string(),
            addr,
            unit,
            map,
            poll_interval_s,
            timeout: Duration::from_secs(1),
            stale_after_failures: 3,
            backoff_initial: Duration::from_secs(2),
            backoff_max: Duration::from_secs(300),
            write_queue: 64,
        }
    }
}

/// The latest value of one point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointValue {
    /// Engineering value (NaN when the device reported no value).
    pub value: f64,
    /// Plant time of the last successful read, s (−∞ if never read).
    pub t_s: f64,
    /// Trust in the value.
    pub quality: Quality,
}

/// Counters and state of one device's link.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceStatus {
    /// Connected now.
    pub connected: bool,
    /// Failed polls or connects in a row.
    pub consecutive_failures: u32,
    /// Completed poll cycles.
    pub polls: u64,
    /// Transport errors (connect refused, reset, protocol errors).
    pub transport_errors: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// Modbus exception responses.
    pub exceptions: u64,
    /// Readings outside their point's plausible range (`min`/`max` of the map), marked bad.
    pub implausible: u64,
    /// Setpoint writes sent.
    pub writes: u64,
    /// Writes skipped because the device already had the value.
    pub writes_skipped: u64,
    /// Writes refused by the device or not confirmed by read-back.
    pub write_failures: u64,
    /// Queued writes dropped because a newer value for the same point arrived before they
    /// were sent (latest value per point wins).
    pub writes_superseded: u64,
    /// Last error, for operators.
    pub last_error: Option<String>,
    /// Wall-clock time of the last complete poll cycle (writes and reads), s.
    pub last_poll_s: f64,
    /// Sum of the wall-clock times of all complete poll cycles (`polls` of them), s.
    pub poll_seconds_sum: f64,
}

/// A write could not be queued.
#[derive(Debug, Error, PartialEq)]
pub enum WriteError {
    /// No point of that name in the map.
    #[error("device {device}: no point `{point}` in its register map")]
    UnknownPoint {
        /// Device.
        device: String,
        /// Point.
        point: String,
    },
    /// The point is read-only.
    #[error("device {device}: point `{point}` is not writable")]
    NotWritable {
        /// Device.
        device: String,
        /// Point.
        point: String,
    },
    /// The write queue is full (the device is not keeping up): refused, not dropped silently.
    #[error("device {device}: write queue full, `{point}` refused")]
    QueueFull {
        /// Device.
        device: String,
        /// Point.
        point: String,
    },
}

struct Shared {
    points: Vec<PointValue>,
    status: DeviceStatus,
}

/// Handle to a running device task.
pub struct DeviceHandle {
    name: String,
    map: Arc<RegisterMap>,
    shared: Arc<Mutex<Shared>>,
    writes: mpsc::Sender<(usize, f64)>,
    task: JoinHandle<()>,
}

impl DeviceHandle {
    /// Device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The latest value of a point by name.
    pub fn point(&self, name: &str) -> Option<PointValue> {
        let i = self.map.points.iter().position(|p| p.name == name)?;
        self.shared.lock().ok().map(|s| s.points[i])
    }

    /// Whether the device's register map has a point of this name.
    pub fn has_point(&self, name: &str) -> bool {
        self.map.points.iter().any(|p| p.name == name)
    }

    /// Link status and counters.
    pub fn status(&self) -> DeviceStatus {
        self.shared.lock().map(|s| s.status.clone()).unwrap_or_default()
    }

    /// Queue a write of `value` to point `name` (written on change, then read back).
    pub fn write(&self, name: &str, value: f64) -> Result<(), WriteError> {
        let Some(i) = self.map.points.iter().position(|p| p.name == name) else {
            return Err(WriteError::UnknownPoint {
                device: self.name.clone(),
                point: name.to_string(),
            });
        };
        if !self.map.points[i].writable {
            return Err(WriteError::NotWritable {
                device: self.name.clone(),
                point: name.to_string(),
            });
        }
        self.writes.try_send((i, value)).map_err(|_| WriteError::QueueFull {
            device: self.name.clone(),
            point: name.to_string(),
        })
    }

    /// Stop the device task.
    pub fn abort(&self) {
        self.task.abort();
    }
}

impl Drop for DeviceHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Start polling a device.
pub fn spawn_device(cfg: DeviceConfig, clock: Clock) -> DeviceHandle {
    let n = cfg.map.points.len();
    let shared = Arc::new(Mutex::new(Shared {
        points: vec![
            PointValue {
                value: f64::NAN,
                t_s: f64::NEG_INFINITY,
                quality: Quality::Bad
            };
            n
        ],
        status: DeviceStatus::default(),
    }));
    let (tx, rx) = mpsc::channel(cfg.write_queue.max(1));
    let name = cfg.name.clone();
    let map = cfg.map.clone();
    let task = tokio::spawn(device_task(cfg, clock, shared.clone(), rx));
    DeviceHandle {
        name,
        map,
        shared,
        writes: tx,
        task,
    }
}

enum Failure {
    Transport(String),
    Timeout,
}

/// Writes waiting to be sent: the latest value per point, in the order points were first queued.
/// Bounded by the number of points in the map however long the device is away.
#[derive(Debug, Default)]
pub struct PendingWrites {
    value: Vec<Option<f64>>,
    order: std::collections::VecDeque<usize>,
}

impl PendingWrites {
    /// Room for a map of `points` points.
    pub fn new(points: usize) -> Self {
        Self {
            value: vec![None; points],
            order: std::collections::VecDeque::new(),
        }
    }

    /// Queue `v` for point `i`; returns true when it superseded a value not yet sent.
    pub fn push(&mut self, i: usize, v: f64) -> bool {
        let Some(slot) = self.value.get_mut(i) else {
            return false;
        };
        if slot.replace(v).is_some() {
            true
        } else {
            self.order.push_back(i);
            false
        }
    }

    /// Put back a write that could not be sent, unless a newer value for its point is waiting.
    pub fn retry(&mut self, i: usize, v: f64) {
        if let Some(slot) = self.value.get_mut(i) {
            if slot.is_none() {
                *slot = Some(v);
                self.order.push_front(i);
            }
        }
    }

    /// The oldest waiting write.
    pub fn pop(&mut self) -> Option<(usize, f64)> {
        while let Some(i) = self.order.pop_front() {
            if let Some(v) = self.value[i].take() {
                return Some((i, v));
            }
        }
        None
    }

    /// Writes waiting.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Nothing waiting.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

fn queue_write(cfg: &DeviceConfig, shared: &Arc<Mutex<Shared>>, pending: &mut PendingWrites, (i, v): (usize, f64)) {
    if pending.push(i, v) {
        set(shared, |s| {
            s.status.writes_superseded += 1;
            let n = s.status.writes_superseded;
            if n.is_power_of_two() {
                tracing::warn!(
                    device = %cfg.name,
                    point = %cfg.map.points[i].name,
                    superseded_so_far = n,
                    "queued write superseded by a newer value before it was sent (device not keeping up or away)"
                );
            }
        });
    }
}

async fn device_task(
    cfg: DeviceConfig,
    clock: Clock,
    shared: Arc<Mutex<Shared>>,
    mut rx: mpsc::Receiver<(usize, f64)>,
) {
    let plan = cfg.map.read_plan(4);
    let mut ctx: Option<Context> = None;
    let mut backoff = cfg.backoff_initial;
    let mut next_connect = Instant::now();
    let mut pending = PendingWrites::new(cfg.map.points.len());
    loop {
        let cycle_start = Instant::now();
        if ctx.is_none() && Instant::now() >= next_connect {
            match timeout(cfg.timeout, tcp::connect_slave(cfg.addr, Slave(cfg.unit))).await {
                Ok(Ok(c)) => {
                    ctx = Some(c);
                    backoff = cfg.backoff_initial;
                    set(&shared, |s| s.status.connected = true);
                }
                Ok(Err(e)) => {
                    fail(&cfg, &shared, Failure::Transport(format!("connect {}: {e}", cfg.addr)));
                    next_connect = Instant::now() + backoff;
                    backoff = (backoff * 2).min(cfg.backoff_max);
                }
                Err(_) => {
                    fail(&cfg, &shared, Failure::Timeout);
                    next_connect = Instant::now() + backoff;
                    backoff = (backoff * 2).min(cfg.backoff_max);
                }
            }
        }
        if let Some(c) = ctx.as_mut() {
            let mut ok = true;
            while let Ok(w) = rx.try_recv() {
                queue_write(&cfg, &shared, &mut pending, w);
            }
            // Writes first (latest value per point wins), each verified by read-back; on a
            // failure the unsent ones stay queued for the next connection.
            while let Some((i, v)) = pending.pop() {
                match write_point(&cfg, c, &shared, i, v).await {
                    Ok(()) => {}
                    Err(f) => {
                        pending.retry(i, v);
                        fail(&cfg, &shared, f);
                        ok = false;
                        break;
                    }
                }
            }
            if ok {
                for block in &plan {
                    match read_block(&cfg, c, &clock, &shared, block).await {
                        Ok(()) => {}
                        Err(f) => {
                            fail(&cfg, &shared, f);
                            ok = false;
                            break;
                        }
                    }
                }
            }
            if ok {
                let took = cycle_start.elapsed().as_secs_f64();
                set(&shared, |s| {
                    s.status.last_poll_s = took;
                    s.status.poll_seconds_sum += took;
                    s.status.polls += 1;
                    s.status.consecutive_failures = 0;
                });
            } else {
                // Drop the connection: a late reply would desynchronise it.
                ctx = None;
                set(&shared, |s| s.status.connected = false);
                next_connect = Instant::now() + backoff;
                backoff = (backoff * 2).min(cfg.backoff_max);
            }
        }
        let wait = clock.wall(cfg.poll_interval_s).saturating_sub(cycle_start.elapsed());
        let until = if ctx.is_none() {
            (Instant::now() + wait).min(next_connect.max(Instant::now()))
        } else {
            Instant::now() + wait
        };
        let until = until.max(Instant::now() + Duration::from_millis(1));
        tokio::select! {
            _ = tokio::time::sleep_until(until) => {}
            w = rx.recv() => match w {
                Some(w) => queue_write(&cfg, &shared, &mut pending, w),
                None => {
                    // The handle is gone: finish.
                    if ctx.is_none() { return; }
                    sleep(Duration::from_millis(1)).await;
                }
            }
        }
    }
}

fn set(shared: &Arc<Mutex<Shared>>, f: impl FnOnce(&mut Shared)) {
    if let Ok(mut s) = shared.lock() {
        f(&mut s);
    }
}

fn fail(cfg: &DeviceConfig, shared: &Arc<Mutex<Shared>>, f: Failure) {
    set(shared, |s| {
        s.status.consecutive_failures = s.status.consecutive_failures.saturating_add(1);
        match f {
            Failure::Transport(e) => {
                s.status.transport_errors += 1;
                s.status.last_error = Some(e);
            }
            Failure::Timeout => {
                s.status.timeouts += 1;
                s.status.last_error = Some(format!("request to {} timed out after {:?}", cfg.addr, cfg.timeout));
            }
        }
        s.status.connected = false;
        let n = s.status.consecutive_failures;
        if n == 1 || n == cfg.stale_after_failures || n.is_power_of_two() {
            tracing::warn!(
                device = %cfg.name,
                addr = %cfg.addr,
                failures_in_a_row = n,
                values_bad = n >= cfg.stale_after_failures,
                reason = %s.status.last_error.as_deref().unwrap_or(""),
                "Modbus device failing"
            );
        }
        if s.status.consecutive_failures >= cfg.stale_after_failures {
            for p in &mut s.points {
                p.quality = Quality::Bad;
            }
        }
    });
}

async fn request<T>(
    cfg: &DeviceConfig,
    fut: impl std::future::Future<Output = tokio_modbus::Result<T>>,
) -> Result<Result<T, tokio_modbus::ExceptionCode>, Failure> {
    match timeout(cfg.timeout, fut).await {
        Err(_) => Err(Failure::Timeout),
        Ok(Err(e)) => Err(Failure::Transport(format!("{}: {e}", cfg.addr))),
        Ok(Ok(r)) => Ok(r),
    }
}

async fn read_block(
    cfg: &DeviceConfig,
    c: &mut Context,
    clock: &Clock,
    shared: &Arc<Mutex<Shared>>,
    block: &ReadBlock,
) -> Result<(), Failure> {
    let words = match block.table {
        Table::Input => request(cfg, c.read_input_registers(block.start, block.count)).await?,
        Table::Holding => request(cfg, c.read_holding_registers(block.start, block.count)).await?,
        Table::Coil => request(cfg, c.read_coils(block.start, block.count))
            .await?
            .map(|b| b.into_iter().map(u16::from).collect()),
        Table::Discrete => request(cfg, c.read_discrete_inputs(block.start, block.count))
            .await?
            .map(|b| b.into_iter().map(u16::from).collect()),
    };
    let now = clock.now_s();
    match words {
        Ok(words) => {
            let decoded = cfg.map.decode_block(block, &words);
            set(shared, |s| {
                for (i, d) in decoded {
                    s.points[i] = match d {
                        Decoded::Value(v) if !cfg.map.points[i].within_limits(v) => {
                            s.status.implausible += 1;
                            let p = &cfg.map.points[i];
                            let msg = format!(
                                "{}: `{}` = {v} is outside its plausible range {}..={}: marked bad",
                                cfg.name,
                                p.name,
                                p.min.unwrap_or(f64::NEG_INFINITY),
                                p.max.unwrap_or(f64::INFINITY)
                            );
                            if s.status.implausible.is_power_of_two() {
                                tracing::warn!(device = %cfg.name, point = %p.name, value = v, so_far = s.status.implausible, "implausible reading: {msg}");
                            }
                            s.status.last_error = Some(msg);
                            PointValue {
                                value: v,
                                t_s: now,
                                quality: Quality::Bad,
                            }
                        }
                        Decoded::Value(v) => PointValue {
                            value: v,
                            t_s: now,
                            quality: Quality::Good,
                        },
                        Decoded::Sentinel | Decoded::Invalid(_) => PointValue {
                            value: f64::NAN,
                            t_s: now,
                            quality: Quality::Uncertain,
                        },
                    };
                }
            });
            Ok(())
        }
        Err(
            code @ (tokio_modbus::ExceptionCode::GatewayTargetDevice
            | tokio_modbus::ExceptionCode::GatewayPathUnavailable),
        ) => {
            // No device behind this unit id answers (wrong unit id, or the unit is gone).
            set(shared, |s| s.status.exceptions += 1);
            Err(Failure::Transport(format!(
                "{} (unit {}): gateway exception {code:?} reading {:?} {}+{}: no device answers this unit id",
                cfg.addr, cfg.unit, block.table, block.start, block.count
            )))
        }
        Err(code) => {
            // The device answered with an exception: the link is fine, these points are not.
            set(shared, |s| {
                s.status.exceptions += 1;
                s.status.last_error = Some(format!(
                    "{}: exception {code:?} reading {:?} {}+{}",
                    cfg.name, block.table, block.start, block.count
                ));
                for (i, p) in cfg.map.points.iter().enumerate() {
                    if p.table == block.table && p.address >= block.start && p.address < block.start + block.count {
                        s.points[i].quality = Quality::Bad;
                    }
                }
            });
            Ok(())
        }
    }
}

async fn write_point(
    cfg: &DeviceConfig,
    c: &mut Context,
    shared: &Arc<Mutex<Shared>>,
    i: usize,
    v: f64,
) -> Result<(), Failure> {
    let p = &cfg.map.points[i];
    let words = match encode(p, v) {
        Ok(w) => w,
        Err(e) => {
            set(shared, |s| {
                s.status.write_failures += 1;
                s.status.last_error = Some(e.to_string());
            });
            return Ok(());
        }
    };
    // Write on change only: the device already holds this value (as last read back).
    let current = shared.lock().map(|s| s.points[i]).ok();
    if let Some(cur) = current {
        if cur.quality == Quality::Good && (cur.value - v).abs() < 0.5 * p.scale.abs() {
            set(shared, |s| s.status.writes_skipped += 1);
            return Ok(());
        }
    }
    if p.table != Table::Holding {
        set(shared, |s| {
            s.status.write_failures += 1;
            s.status.last_error = Some(format!("{}: `{}` is not a holding register", cfg.name, p.name));
        });
        return Ok(());
    }
    let r = if words.len() == 1 {
        request(cfg, c.write_single_register(p.address, words[0])).await?
    } else {
        request(cfg, c.write_multiple_registers(p.address, &words)).await?
    };
    set(shared, |s| s.status.writes += 1);
    if let Err(code) = r {
        set(shared, |s| {
            s.status.write_failures += 1;
            s.status.last_error = Some(format!(
                "{}: device refused `{}` = {v}: exception {code:?}",
                cfg.name, p.name
            ));
        });
        return Ok(());
    }
    // Read back to verify.
    let back = request(cfg, c.read_holding_registers(p.address, p.width())).await?;
    match back {
        Ok(w) if w == words => {
            if let Decoded::Value(x) = decode(p, &w) {
                set(shared, |s| s.points[i].value = x);
            }
        }
        Ok(w) => set(shared, |s| {
            s.status.write_failures += 1;
            s.status.last_error = Some(format!(
                "{}: read-back of `{}` gave {w:?}, wrote {words:?}",
                cfg.name, p.name
            ));
        }),
        Err(code) => set(shared, |s| {
            s.status.write_failures += 1;
            s.status.last_error = Some(format!("{}: read-back of `{}` refused: {code:?}", cfg.name, p.name));
        }),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::PendingWrites;

    #[test]
    fn pending_writes_keep_the_latest_value_per_point_and_stay_bounded() {
        let mut p = PendingWrites::new(3);
        let mut superseded = 0;
        for k in 0..191u32 {
            // Setpoint (point 0) and heartbeat (point 2) interleaved, as ticks queue them.
            superseded += u32::from(p.push(((k % 2) * 2) as usize, f64::from(k)));
        }
        assert_eq!(superseded, 189);
        assert_eq!(p.len(), 2, "bounded by the points, not by the writes queued");
        assert_eq!(p.pop(), Some((0, 190.0)));
        assert_eq!(p.pop(), Some((2, 189.0)));
        assert_eq!(p.pop(), None);
        // A write that failed goes back, unless a newer one for its point is waiting.
        p.push(1, 5.0);
        let w = p.pop().unwrap();
        p.retry(w.0, w.1);
        assert_eq!(p.pop(), Some((1, 5.0)));
        p.push(1, 6.0);
        p.retry(1, 5.0);
        assert_eq!(p.pop(), Some((1, 6.0)));
        assert!(p.is_empty());
        assert!(!p.push(99, 1.0), "a point outside the map is ignored");
    }
}
