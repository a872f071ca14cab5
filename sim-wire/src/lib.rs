//! # coolplane-sim-wire
//!
//! The simulated plant on the wire, as real equipment would present it: every CDU, every hall's
//! facility water system and the site meter is a Modbus TCP server (one port each, on loopback
//! by default) with the shipped register maps (`maps/*.toml`), local firmware behaviour (the
//! plant's PI loops, BMS timeout, alarms) and Modbus exceptions for bad addresses and out-of-range
//! writes; every rack publishes its telemetry over MQTT once per interval (per-GPU arrays;
//! odd-numbered racks report die temperatures as margins to slowdown, as newer drivers do) and
//! applies power-limit commands, answering with what it applied. Simulated time may run faster
//! than real time (`speed`).
//!
//! Each Modbus server is a device that survives a bad day: an `accept()` error (file descriptors
//! exhausted, for one) is logged, counted and retried with back-off instead of ending the server;
//! connections are capped per device (the next one is closed at once, counted); a connection that
//! sends nothing for the idle timeout (a half frame, a dead peer) is closed, counted; and only the
//! configured unit id ([`UNIT_ID`]) is answered: any other gets exception 0x0B (gateway target
//! device failed to respond), as a gateway answers for a unit that is not there.
//!
//! This crate is linked into the `coolplane` binary only for `sim-plant serve` and `demo`: the
//! production daemon never needs it.

use coolplane_adapters::clock::Clock;
use coolplane_adapters::regmap::{encode_reading, RegisterMap, Table};
use coolplane_adapters::telemetry::{
    encode_power_limit_result, encode_rack_telemetry, parse_power_limit_command, PowerLimitResult, RackTelemetry,
    TempReport, Topics,
};
use coolplane_core::signals::{
    Actions, CduCommand, FacilityCommand, Measurements, Quality, RackPowerLimits, RejectionMode,
};
use coolplane_scenario::Scenario;
use coolplane_sim_plant::cluster::Cluster;
use coolplane_sim_plant::kpi::Kpis;
use coolplane_sim_plant::Plant;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use std::collections::HashMap;
use std::future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_modbus::server::tcp::Server;
use tokio_modbus::{ExceptionCode, Request, Response, SlaveRequest};

/// The Modbus unit id every simulated device answers to (others get exception 0x0B).
pub const UNIT_ID: u8 = 1;

/// Limits of every simulated device's Modbus server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerLimits {
    /// Connections served at once per device; the next is closed at once (counted).
    pub max_connections: usize,
    /// A connection that sends nothing for this long (wall clock) is closed (counted).
    pub idle_timeout: Duration,
}

impl Default for ServerLimits {
    /// 16 connections per device, 60 s idle timeout.
    fn default() -> Self {
        Self {
            max_connections: 16,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Counters of the simulated devices' Modbus servers, over all devices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// `accept()` errors (retried with back-off).
    pub accept_errors: u64,
    /// Connections closed at once because the device had `max_connections` already.
    pub connections_refused: u64,
    /// Connections closed after the idle timeout.
    pub idle_closed: u64,
    /// Requests for another unit id, answered with exception 0x0B.
    pub wrong_unit: u64,
}

#[derive(Default)]
struct ServerCounters {
    active: AtomicUsize,
    accept_errors: AtomicU64,
    refused: AtomicU64,
    idle_closed: AtomicU64,
}

/// One of a device's connection slots, given back when the connection ends.
struct ConnSlot(Arc<ServerCounters>);

impl ConnSlot {
    fn take(c: &Arc<ServerCounters>, max: usize) -> Option<Self> {
        if c.active.fetch_add(1, Ordering::SeqCst) >= max {
            c.active.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Self(c.clone()))
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A device's side of a connection: reads fail with `TimedOut` after `idle` without a byte.
struct IdleStream {
    inner: tokio::net::TcpStream,
    idle: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
    slot: ConnSlot,
    device: String,
}

impl AsyncRead for IdleStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    let at = tokio::time::Instant::now() + this.idle;
                    this.deadline.as_mut().reset(at);
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                if std::future::Future::poll(this.deadline.as_mut(), cx).is_ready() {
                    let n = this.slot.0.idle_closed.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_power_of_two() {
                        tracing::warn!(device = %this.device, idle_s = this.idle.as_secs_f64(), closed_so_far = n, "Modbus connection idle (or a frame left half sent): closed");
                    }
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "connection idle: closed",
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for IdleStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Serve one device until the task is aborted: `accept()` errors never end it.
async fn serve_device(
    listener: TcpListener,
    svc: DeviceService,
    limits: ServerLimits,
    counters: Arc<ServerCounters>,
    device: String,
) {
    let server = Server::new(listener);
    let mut backoff = Duration::from_millis(10);
    loop {
        let started = tokio::time::Instant::now();
        let on_connected = |stream: tokio::net::TcpStream, peer: SocketAddr| {
            let svc = svc.clone();
            let counters = counters.clone();
            let device = device.clone();
            async move {
                let Some(slot) = ConnSlot::take(&counters, limits.max_connections) else {
                    let n = counters.refused.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_power_of_two() {
                        tracing::warn!(device = %device, peer = %peer, max_connections = limits.max_connections, refused_so_far = n, "Modbus connection refused: too many connections");
                    }
                    return Ok(None);
                };
                let stream = IdleStream {
                    inner: stream,
                    idle: limits.idle_timeout,
                    deadline: Box::pin(tokio::time::sleep(limits.idle_timeout)),
                    slot,
                    device,
                };
                Ok::<Option<(DeviceService, IdleStream)>, std::io::Error>(Some((svc, stream)))
            }
        };
        // `serve` returns only on an accept() error: count, log, back off, accept again.
        if let Err(e) = server.serve(&on_connected, |_err| {}).await {
            let n = counters.accept_errors.fetch_add(1, Ordering::Relaxed) + 1;
            if started.elapsed() > Duration::from_secs(5) {
                backoff = Duration::from_millis(10);
            }
            tracing::warn!(device = %device, error = %e, accept_errors = n, retry_in_ms = backoff.as_millis() as u64, "Modbus accept() failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
}

/// The register maps shipped with the project (also under `maps/`).
pub const CDU_MAP: &str = include_str!("../../maps/coolplane-cdu.toml");
/// Facility water system map.
pub const FACILITY_MAP: &str = include_str!("../../maps/coolplane-facility.toml");
/// Site meter map.
pub const METER_MAP: &str = include_str!("../../maps/coolplane-meter.toml");
/// Two-phase immersion tank map: the CDU map (the tank's condenser-water skid) plus the tank's
/// pressure, pool temperature, fluid level and relief state.
pub const TANK_MAP: &str = include_str!("../../maps/coolplane-2pic-tank.toml");

/// The simulated plant could not be started.
#[derive(Debug, Error)]
pub enum SimWireError {
    /// A shipped register map did not parse (a build defect).
    #[error("register map: {0}")]
    Map(String),
    /// A port could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// OS error.
        source: std::io::Error,
    },
    /// The plant could not be built.
    #[error(transparent)]
    Plant(#[from] coolplane_sim_plant::PlantError),
    /// The devices' consecutive ports would run past 65535.
    #[error("modbus base port {base}: {devices} devices need ports {base}..={last}, past 65535; choose a base port of at most {max_base} (or 0 for any free ports)")]
    PortRange {
        /// First port asked for.
        base: u16,
        /// Devices to serve.
        devices: usize,
        /// Last port they would need.
        last: usize,
        /// Highest base port that fits.
        max_base: usize,
    },
}

/// What kind of device an endpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A CDU.
    Cdu,
    /// A hall's facility water system.
    Facility,
    /// The site meter.
    Meter,
}

/// One simulated Modbus device.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Role.
    pub role: Role,
    /// Index within its role (CDU index, hall index, 0 for the meter).
    pub index: usize,
    /// Device name (from the topology).
    pub name: String,
    /// Listening address.
    pub addr: SocketAddr,
    /// Name of the shipped register map it serves (`coolplane-cdu`, `coolplane-2pic-tank`, ...),
    /// or the name given with a map served instead ([`SimWire::start_with_cdu_map`]).
    pub map: String,
}

/// How to serve the simulated plant.
#[derive(Debug, Clone)]
pub struct SimWireConfig {
    /// The resolved scenario (site, weather, workload, events, seed).
    pub scenario: Scenario,
    /// Plant step, s of plant time.
    pub step_s: f64,
    /// Address to bind the Modbus servers to.
    pub bind: IpAddr,
    /// First Modbus port: CDUs from here, then facility systems, then the meter. 0: any free ports.
    pub modbus_base_port: u16,
    /// MQTT broker host (None: no MQTT).
    pub mqtt: Option<(String, u16)>,
    /// Rack telemetry period, s of plant time.
    pub telemetry_interval_s: f64,
    /// Apply a power-limit command when it arrives (the plant step is split at its arrival and
    /// the plant steps when the clock reaches a step's end), as a real rack agent does within
    /// milliseconds; otherwise at the next plant step, with the plant a step ahead of the clock.
    pub limits_on_arrival: bool,
}

struct DeviceImage {
    map: Arc<RegisterMap>,
    input: Vec<u16>,
    holding: Vec<u16>,
    /// Firmware limits of writable points (engineering units), by point index.
    limits: HashMap<usize, (f64, f64)>,
    /// Accepted writes since the last plant step: (point index, engineering value).
    writes: Vec<(usize, f64)>,
    /// Answering requests (false: the plant says this device is offline, or it was forced).
    online: bool,
    /// Forced silent by [`SimWire::set_online`].
    forced_offline: bool,
    requests: u64,
    exceptions: u64,
    wrong_unit: u64,
}

impl DeviceImage {
    fn new(map: Arc<RegisterMap>) -> Self {
        let size = |t: Table| {
            map.points
                .iter()
                .filter(|p| p.table == t)
                .map(|p| p.address as usize + p.width() as usize)
                .max()
                .unwrap_or(0)
        };
        Self {
            input: vec![0; size(Table::Input)],
            holding: vec![0; size(Table::Holding)],
            map,
            limits: HashMap::new(),
            writes: Vec::new(),
            online: true,
            forced_offline: false,
            requests: 0,
            exceptions: 0,
            wrong_unit: 0,
        }
    }

    /// Store a value into its registers as the device would present it.
    fn set(&mut self, name: &str, value: f64) {
        let Some(i) = self.map.points.iter().position(|p| p.name == name) else {
            return;
        };
        let p = &self.map.points[i];
        // Device side: saturate like firmware; NaN ("no value") becomes the point's sentinel.
        let Ok(words) = encode_reading(p, Some(value)) else {
            return;
        };
        let regs = match p.table {
            Table::Input => &mut self.input,
            Table::Holding => &mut self.holding,
            _ => return,
        };
        let a = p.address as usize;
        if a + words.len() <= regs.len() {
            regs[a..a + words.len()].copy_from_slice(&words);
        }
    }

    fn read(&self, table: Table, addr: u16, cnt: u16) -> Result<Vec<u16>, ExceptionCode> {
        let regs = if table == Table::Input {
            &self.input
        } else {
            &self.holding
        };
        let (a, n) = (addr as usize, cnt as usize);
        if n == 0 || n > 125 || a + n > regs.len() {
            return Err(ExceptionCode::IllegalDataAddress);
        }
        Ok(regs[a..a + n].to_vec())
    }

    fn write(&mut self, addr: u16, words: &[u16]) -> Result<(), ExceptionCode> {
        // A write must cover whole writable points exactly.
        let mut off = 0usize;
        let mut accepted = Vec::new();
        while off < words.len() {
            let a = addr as usize + off;
            let Some(i) = self
                .map
                .points
                .iter()
                .position(|p| p.table == Table::Holding && p.address as usize == a)
            else {
                return Err(ExceptionCode::IllegalDataAddress);
            };
            let p = &self.map.points[i];
            let w = p.width() as usize;
            if !p.writable || off + w > words.len() {
                return Err(ExceptionCode::IllegalDataAddress);
            }
            let chunk = &words[off..off + w];
            let value = match coolplane_adapters::regmap::decode(p, chunk) {
                coolplane_adapters::regmap::Decoded::Value(v) => v,
                _ => return Err(ExceptionCode::IllegalDataValue),
            };
            let (lo, hi) = self
                .limits
                .get(&i)
                .copied()
                .unwrap_or((p.min.unwrap_or(f64::MIN), p.max.unwrap_or(f64::MAX)));
            if !(value >= lo - 1e-9 && value <= hi + 1e-9) {
                return Err(ExceptionCode::IllegalDataValue);
            }
            accepted.push((i, value, a, chunk.to_vec()));
            off += w;
        }
        for (i, value, a, chunk) in accepted {
            self.holding[a..a + chunk.len()].copy_from_slice(&chunk);
            self.writes.push((i, value));
        }
        Ok(())
    }
}

#[derive(Clone)]
struct DeviceService {
    image: Arc<Mutex<DeviceImage>>,
}

impl tokio_modbus::server::Service for DeviceService {
    type Request = SlaveRequest<'static>;
    type Response = Option<Response>;
    type Exception = ExceptionCode;
    type Future = future::Ready<Result<Self::Response, Self::Exception>>;

    fn call(&self, req: Self::Request) -> Self::Future {
        let Ok(mut img) = self.image.lock() else {
            return future::ready(Err(ExceptionCode::ServerDeviceFailure));
        };
        if !img.online {
            // A device that stopped answering: no response at all (the client times out).
            return future::ready(Ok(None));
        }
        img.requests += 1;
        if req.slave != UNIT_ID {
            // A gateway's answer for a unit that is not there: a wrong unit id in a
            // configuration shows up at once, instead of this device answering as any unit.
            img.wrong_unit += 1;
            img.exceptions += 1;
            if img.wrong_unit.is_power_of_two() {
                tracing::warn!(
                    unit = req.slave,
                    served_unit = UNIT_ID,
                    so_far = img.wrong_unit,
                    "Modbus request for another unit id: answered 0x0B"
                );
            }
            return future::ready(Err(ExceptionCode::GatewayTargetDevice));
        }
        let r = match req.request {
            Request::ReadInputRegisters(a, n) => img.read(Table::Input, a, n).map(Response::ReadInputRegisters),
            Request::ReadHoldingRegisters(a, n) => img.read(Table::Holding, a, n).map(Response::ReadHoldingRegisters),
            Request::WriteSingleRegister(a, w) => img.write(a, &[w]).map(|()| Response::WriteSingleRegister(a, w)),
            Request::WriteMultipleRegisters(a, ws) => {
                let n = ws.len() as u16;
                img.write(a, &ws).map(|()| Response::WriteMultipleRegisters(a, n))
            }
            _ => Err(ExceptionCode::IllegalFunction),
        };
        if r.is_err() {
            img.exceptions += 1;
        }
        future::ready(r.map(Some))
    }
}

/// Power-limit commands received and not yet applied: (rack, request id, limits).
/// Plant time of the short step that applies power-limit commands arriving between plant steps.
const APPLY_S: f64 = 0.01;

type PowerQueue = Arc<Mutex<Vec<(usize, String, Vec<f32>)>>>;

/// Shared state of a running simulated plant.
struct Shared {
    kpis: Option<Kpis>,
    t_s: f64,
    last: Option<Measurements>,
    telemetry_published: u64,
    /// Telemetry messages not sent because the broker was not connected.
    telemetry_not_sent: u64,
    commands_applied: u64,
}

/// A running simulated plant.
pub struct SimWire {
    counters: Vec<Arc<ServerCounters>>,
    endpoints: Vec<Endpoint>,
    images: Vec<(Role, usize, Arc<Mutex<DeviceImage>>)>,
    shared: Arc<Mutex<Shared>>,
    tasks: Vec<JoinHandle<()>>,
}

impl SimWire {
    /// Bind every device, connect to the broker and start stepping the plant on `clock`, with
    /// the default [`ServerLimits`].
    pub async fn start(cfg: SimWireConfig, clock: Clock) -> Result<Self, SimWireError> {
        Self::start_with(cfg, ServerLimits::default(), clock).await
    }

    /// [`SimWire::start`] with the given limits of the devices' Modbus servers.
    pub async fn start_with(cfg: SimWireConfig, limits: ServerLimits, clock: Clock) -> Result<Self, SimWireError> {
        Self::start_with_cdu_map(cfg, limits, clock, None).await
    }

    /// [`SimWire::start_with`], every CDU (not a two-phase immersion tank's skid) serving
    /// `cdu_map` (a name for [`Endpoint::map`] and the map) instead of the shipped CDU map: a
    /// third-party map tried against the plant. The device couples what the plant knows by point
    /// name (`docs/point-names.md`): it fills the readings the map names, takes writes of
    /// `supply_setpoint_c`, `flow_setpoint_lpm` and `heartbeat`, and leaves every other register
    /// at 0.
    pub async fn start_with_cdu_map(
        cfg: SimWireConfig,
        limits: ServerLimits,
        clock: Clock,
        cdu_map: Option<(String, Arc<RegisterMap>)>,
    ) -> Result<Self, SimWireError> {
        let maps = [CDU_MAP, FACILITY_MAP, METER_MAP, TANK_MAP]
            .iter()
            .zip([
                "coolplane-cdu.toml",
                "coolplane-facility.toml",
                "coolplane-meter.toml",
                "coolplane-2pic-tank.toml",
            ])
            .map(|(t, n)| {
                RegisterMap::from_toml_str(n, t)
                    .map(Arc::new)
                    .map_err(|e| SimWireError::Map(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let sc = &cfg.scenario;
        let mut plant = Plant::new(&sc.site, sc.spec.scenario.seed)?;
        for e in &sc.events {
            plant.schedule_fault(*e);
        }
        let topo = plant.topology().clone();
        let n_devices = topo.cdus.len() + topo.halls.len() + 1;
        let last = cfg.modbus_base_port as usize + n_devices - 1;
        if cfg.modbus_base_port != 0 && last > usize::from(u16::MAX) {
            return Err(SimWireError::PortRange {
                base: cfg.modbus_base_port,
                devices: n_devices,
                last,
                max_base: usize::from(u16::MAX) + 1 - n_devices,
            });
        }
        let mut endpoints = Vec::new();
        let mut images = Vec::new();
        let mut tasks = Vec::new();
        let mut servers = Vec::new();
        let mut port = cfg.modbus_base_port;
        let mut add = |role: Role,
                       index: usize,
                       name: String,
                       map: Arc<RegisterMap>,
                       map_name: &str|
         -> Result<(), SimWireError> {
            let addr = SocketAddr::new(cfg.bind, port);
            if port != 0 {
                port = port.wrapping_add(1);
            }
            let std_listener =
                std::net::TcpListener::bind(addr).map_err(|source| SimWireError::Bind { addr, source })?;
            std_listener
                .set_nonblocking(true)
                .map_err(|source| SimWireError::Bind { addr, source })?;
            let bound = std_listener
                .local_addr()
                .map_err(|source| SimWireError::Bind { addr, source })?;
            let listener = TcpListener::from_std(std_listener).map_err(|source| SimWireError::Bind { addr, source })?;
            let image = Arc::new(Mutex::new(DeviceImage::new(map)));
            let svc = DeviceService { image: image.clone() };
            // Accepting starts after the first plant step (connections wait in the backlog).
            servers.push((listener, svc, name.clone()));
            endpoints.push(Endpoint {
                role,
                index,
                name,
                addr: bound,
                map: map_name.to_string(),
            });
            images.push((role, index, image));
            Ok(())
        };
        for (i, c) in topo.cdus.iter().enumerate() {
            // A two-phase immersion tank's skid serves the tank map (a superset of the CDU map).
            if plant.immersion().is_some_and(|im| im.is_tank(i)) {
                add(Role::Cdu, i, c.name.clone(), maps[3].clone(), "coolplane-2pic-tank")?;
            } else if let Some((n, m)) = &cdu_map {
                add(Role::Cdu, i, c.name.clone(), m.clone(), n)?;
            } else {
                add(Role::Cdu, i, c.name.clone(), maps[0].clone(), "coolplane-cdu")?;
            }
        }
        for (h, hall) in topo.halls.iter().enumerate() {
            add(
                Role::Facility,
                h,
                format!("{}-fws", hall.name),
                maps[1].clone(),
                "coolplane-facility",
            )?;
        }
        add(
            Role::Meter,
            0,
            format!("{}-meter", sc.site.site.name),
            maps[2].clone(),
            "coolplane-meter",
        )?;
        // Firmware limits and initial holding registers (the local defaults).
        for (role, index, img) in &images {
            let Ok(mut im) = img.lock() else { continue };
            // A register the plant does not model (a third-party map's extras) holds a value of
            // its range: 0, or the end of the range nearer to 0 (a timeout of 1..=60 min holds 1).
            let unmodelled: Vec<(String, f64)> = im
                .map
                .points
                .iter()
                .filter(|p| !p.within_limits(0.0))
                .map(|p| {
                    let v = if p.min.is_some_and(|m| m > 0.0) {
                        p.min.unwrap_or(0.0)
                    } else {
                        p.max.unwrap_or(0.0)
                    };
                    (p.name.clone(), v)
                })
                .collect();
            for (name, v) in unmodelled {
                im.set(&name, v);
            }
            let idx = |im: &DeviceImage, n: &str| im.map.points.iter().position(|p| p.name == n);
            match role {
                Role::Cdu => {
                    let d = &topo.hall_spec(&sc.site, topo.cdus[*index].hall).cdu;
                    let (fmin, fmax) = d.flow_setpoint_range_lpm();
                    if let Some(i) = idx(&im, "supply_setpoint_c") {
                        im.limits.insert(i, (d.supply_setpoint_min_c, d.supply_setpoint_max_c));
                    }
                    if let Some(i) = idx(&im, "flow_setpoint_lpm") {
                        im.limits.insert(i, (fmin.floor(), fmax.ceil()));
                    }
                    im.set("supply_setpoint_c", d.supply_setpoint_c);
                    im.set("flow_setpoint_lpm", d.design_flow_lpm().round());
                    im.set("bms_timeout_s", d.bms_timeout_s);
                }
                Role::Facility => {
                    let f = &topo.hall_spec(&sc.site, *index).facility;
                    if let Some(i) = idx(&im, "supply_setpoint_c") {
                        im.limits
                            .insert(i, (f.supply_setpoint_min_c, f.supply_setpoint_max_c()));
                    }
                    im.set("supply_setpoint_c", f.supply_setpoint_c);
                    im.set("bms_timeout_s", f.bms_timeout_s);
                    // Dry and adiabatic exist only where the dry coolers have adiabatic assist.
                    if let Some(i) = idx(&im, "rejection_mode") {
                        let assist = f.dry_coolers.as_ref().is_some_and(|d| d.adiabatic.is_some());
                        im.limits.insert(i, (0.0, if assist { 2.0 } else { 0.0 }));
                    }
                    im.set("rejection_mode", 0.0);
                }
                Role::Meter => {}
            }
        }
        let shared = Arc::new(Mutex::new(Shared {
            kpis: None,
            t_s: 0.0,
            last: None,
            telemetry_published: 0,
            telemetry_not_sent: 0,
            commands_applied: 0,
        }));
        // MQTT: rack agents.
        let power_cmds: PowerQueue = Arc::new(Mutex::new(Vec::new()));
        let cmd_kick = Arc::new(tokio::sync::Notify::new());
        let topics = Topics::new(&sc.site.site.name);
        let mqtt_up = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mqtt_up2 = mqtt_up.clone();
        let mqtt_client = match &cfg.mqtt {
            Some((host, mport)) => {
                let mut opts = MqttOptions::new(
                    format!("coolplane-sim-{}-{}", sc.site.site.name, std::process::id()),
                    host.clone(),
                    *mport,
                );
                opts.set_keep_alive(Duration::from_secs(15));
                opts.set_max_packet_size(4 * 1024 * 1024, 4 * 1024 * 1024);
                let (client, mut eventloop) = AsyncClient::new(opts, (topo.racks.len() * 2).max(64));
                let rack_index: HashMap<String, usize> = topo
                    .racks
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (r.name.clone(), i))
                    .collect();
                let gpus: Vec<usize> = topo.racks.iter().map(|r| r.gpus.len()).collect();
                let cmds = power_cmds.clone();
                let kick = cmd_kick.clone();
                let sub_client = client.clone();
                let topics2 = topics.clone();
                let broker = format!("{host}:{mport}");
                let up = mqtt_up.clone();
                tasks.push(tokio::spawn(async move {
                    let mut backoff = Duration::from_millis(200);
                    let mut errors: u64 = 0;
                    loop {
                        match eventloop.poll().await {
                            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                                up.store(true, Ordering::SeqCst);
                                backoff = Duration::from_millis(200);
                                let _ = sub_client.try_subscribe(topics2.power_limit_set_filter(), QoS::AtLeastOnce);
                            }
                            Ok(Event::Incoming(Packet::Publish(p))) => {
                                // Retained commands are ignored: nothing replays at start-up.
                                if p.retain {
                                    continue;
                                }
                                let Some(rack) = topics2.rack_of(&p.topic) else {
                                    continue;
                                };
                                let Some(&r) = rack_index.get(rack) else { continue };
                                match parse_power_limit_command(&p.payload, gpus[r]) {
                                    Ok(cmd) => {
                                        if let Ok(mut c) = cmds.lock() {
                                            if c.len() < 10_000 {
                                                c.push((r, cmd.request_id, cmd.limits_w));
                                            }
                                        }
                                        kick.notify_one();
                                    }
                                    Err(e) => {
                                        eprintln!("coolplane sim: rejected power-limit command on {}: {e}", p.topic)
                                    }
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                up.store(false, Ordering::SeqCst);
                                errors += 1;
                                if errors.is_power_of_two() {
                                    tracing::warn!(broker = %broker, error = %e, errors_so_far = errors, "simulated racks: MQTT connection error; telemetry not sent until it is back");
                                    eprintln!("coolplane sim: MQTT broker {broker}: {e} (retrying; telemetry is not sent meanwhile)");
                                }
                                tokio::time::sleep(backoff).await;
                                backoff = (backoff * 2).min(Duration::from_secs(5));
                            }
                        }
                    }
                }));
                Some(client)
            }
            None => None,
        };
        // The plant loop.
        let step_s = cfg.step_s;
        let on_arrival = cfg.limits_on_arrival;
        let images2 = images.clone();
        let shared2 = shared.clone();
        let tel_every = ((cfg.telemetry_interval_s / step_s).round() as u64).max(1);
        let scenario = cfg.scenario.clone();
        let min_cap = sc.site.gpu.min_cap_w as f32;
        let max_cap = sc.site.gpu.tdp_w as f32;
        let slowdown = sc.site.gpu.slowdown_c as f32;
        tasks.push(tokio::spawn(async move {
            let mut cluster = Cluster::new(&plant);
            let mut last_hb: Vec<Option<f64>> = vec![None; images2.len()];
            let mut k: u64 = 0;
            let epoch_ms = unix_ms_now();
            if scenario.scoring_start_s() <= 0.0 {
                plant.start_scoring();
            }
            // Plant time reached so far. The first step runs at once (so the devices never
            // present empty registers); after it, the step ending at (k+1)·step runs when the
            // clock reaches (k+1)·step, so the plant is never more than one step behind the clock
            // nor ahead of it, and a power-limit command can be applied when it arrives.
            let mut t_p = 0.0;
            loop {
                let end = (k + 1) as f64 * step_s;
                let due = if !on_arrival || k == 0 { k as f64 * step_s } else { end };
                let now = clock.now_s();
                let pending = power_cmds.lock().map(|c| !c.is_empty()).unwrap_or(false);
                if now < due {
                    if pending || !on_arrival {
                        // Too close to the step's end to split: the step applies them.
                        tokio::time::sleep(clock.wall(due - now)).await;
                    } else {
                        tokio::select! {
                            _ = tokio::time::sleep(clock.wall(due - now)) => {}
                            _ = cmd_kick.notified() => {}
                        }
                    }
                } else {
                    // Behind the clock: catch up, but let the MQTT and Modbus tasks run.
                    tokio::task::yield_now().await;
                }
                let now = clock.now_s();
                let split = now.max(t_p);
                if now < due && (!on_arrival || split + APPLY_S > end) {
                    continue;
                }
                let cmds: Vec<(usize, String, Vec<f32>)> =
                    power_cmds.lock().map(|mut c| c.drain(..).collect()).unwrap_or_default();
                let boundary = now >= due;
                if !boundary && cmds.is_empty() {
                    continue;
                }
                // A command between steps: run the plant up to its arrival with the limits it
                // had, then apply the new limits from that moment (a short step, so that the
                // answer reports what the plant actually holds).
                let mut spans: Vec<(f64, f64, bool)> = Vec::with_capacity(2);
                if boundary {
                    spans.push((t_p, end, true));
                } else {
                    if split > t_p + 1e-6 {
                        spans.push((t_p, split, false));
                    }
                    spans.push((split, split + APPLY_S, true));
                }
                let mut cmds = Some(cmds);
                let mut results = Vec::new();
                for (t, t_end, with_cmds) in spans {
                    let dt = t_end - t;
                    let mut actions = Actions {
                        cdus: vec![CduCommand::default(); topo.cdus.len()],
                        facilities: vec![FacilityCommand::default(); topo.halls.len()],
                        ..Default::default()
                    };
                    for (j, (role, index, img)) in images2.iter().enumerate() {
                        let Ok(mut im) = img.lock() else { continue };
                        let writes = std::mem::take(&mut im.writes);
                        for (i, v) in writes {
                            let name = im.map.points[i].name.clone();
                            match (role, name.as_str()) {
                                (Role::Cdu, "supply_setpoint_c") => {
                                    actions.cdus[*index].supply_temp_setpoint_c = Some(v)
                                }
                                (Role::Cdu, "flow_setpoint_lpm") => actions.cdus[*index].flow_setpoint_lpm = Some(v),
                                (Role::Facility, "supply_setpoint_c") => {
                                    actions.facilities[*index].supply_temp_setpoint_c = Some(v)
                                }
                                (Role::Facility, "rejection_mode") => {
                                    actions.facilities[*index].rejection_mode =
                                        RejectionMode::from_code(v.round().clamp(0.0, 65535.0) as u16)
                                }
                                (_, "heartbeat") => {
                                    // A heartbeat is a change of the heartbeat register.
                                    if last_hb[j] != Some(v) {
                                        match role {
                                            Role::Cdu => actions.cdus[*index].heartbeat = true,
                                            Role::Facility => actions.facilities[*index].heartbeat = true,
                                            Role::Meter => {}
                                        }
                                        last_hb[j] = Some(v);
                                    }
                                    im.set("heartbeat_echo", v);
                                }
                                _ => {}
                            }
                        }
                    }
                    if with_cmds {
                        for (r, id, limits) in cmds.take().unwrap_or_default() {
                            let clamped: Vec<f32> = limits
                                .iter()
                                .map(|w| {
                                    if w.is_finite() {
                                        w.clamp(min_cap, max_cap)
                                    } else {
                                        max_cap
                                    }
                                })
                                .collect();
                            actions.power_limits.push(RackPowerLimits {
                                rack: r as u32,
                                limits_w: clamped,
                            });
                            results.push((r, id));
                        }
                    }
                    cluster.advance(t, &scenario.workload, &mut plant, None);
                    let ambient = scenario.weather.sample(scenario.weather_time_s(t));
                    plant.step(dt, &ambient, &actions);
                    if t_end >= scenario.scoring_start_s() && t < scenario.scoring_start_s() {
                        plant.start_scoring();
                    }
                    t_p = t_end;
                    if let Ok(mut s) = shared2.lock() {
                        s.commands_applied += actions.power_limits.len() as u64;
                    }
                }
                let t = t_p;
                let m = plant.measurements().clone();
                update_images(&images2, &m);
                let ts_ms = epoch_ms + (t * 1000.0 / clock.speed()) as i64;
                if let Some(client) = &mqtt_client {
                    for (r, id) in results {
                        // The answer is what the plant holds now (a device in comms loss, for
                        // one, keeps its old limits).
                        let res = PowerLimitResult {
                            request_id: id,
                            applied_w: m.gpus.power_limit_w[topo.racks[r].gpus.clone()].to_vec(),
                            ts_unix_ms: ts_ms,
                        };
                        if let Err(e) = client
                            .publish(
                                topics.power_limit_result(&topo.racks[r].name),
                                QoS::AtLeastOnce,
                                false,
                                encode_power_limit_result(&res),
                            )
                            .await
                        {
                            eprintln!(
                                "coolplane sim: power-limit answer for {} not sent: {e}",
                                topo.racks[r].name
                            );
                        }
                    }
                    if boundary && k % tel_every == 0 && !mqtt_up2.load(Ordering::SeqCst) {
                        // No broker: nothing is published, and nothing is counted as published.
                        if let Ok(mut s) = shared2.lock() {
                            s.telemetry_not_sent += topo.racks.len() as u64;
                        }
                    } else if boundary && k % tel_every == 0 {
                        let mut n = 0;
                        for (r, rack) in topo.racks.iter().enumerate() {
                            let g = rack.gpus.clone();
                            let rm = &m.racks[r];
                            let tel = RackTelemetry {
                                ts_unix_ms: ts_ms,
                                rack: rack.name.clone(),
                                seq: k,
                                it_power_kw: rm.it_power_kw.value,
                                inlet_temp_c: rm.inlet_temp_c.value,
                                outlet_temp_c: rm.outlet_temp_c.value,
                                gpu_power_w: m.gpus.power_w[g.clone()].to_vec(),
                                gpu_util: m.gpus.util[g.clone()].to_vec(),
                                gpu_power_limit_w: m.gpus.power_limit_w[g.clone()].to_vec(),
                                gpu_temp_c: m.gpus.temp_c[g.clone()].to_vec(),
                                gpu_clock_events: m.gpus.clock_events[g.clone()].to_vec(),
                                temps_were_margins: false,
                            };
                            let how = if r % 2 == 1 {
                                TempReport::Margin
                            } else {
                                TempReport::Absolute
                            };
                            if client
                                .try_publish(
                                    topics.rack_telemetry(&rack.name),
                                    QoS::AtMostOnce,
                                    false,
                                    encode_rack_telemetry(&tel, how, slowdown),
                                )
                                .is_ok()
                            {
                                n += 1;
                            }
                        }
                        if let Ok(mut s) = shared2.lock() {
                            s.telemetry_published += n;
                        }
                    }
                }
                if let Ok(mut s) = shared2.lock() {
                    s.t_s = t;
                    s.kpis = Some(plant.kpis());
                    s.last = Some(m);
                }
                if boundary {
                    k += 1;
                }
            }
        }));
        // Serve only once the registers hold the first step's readings.
        for _ in 0..500 {
            if shared.lock().map(|s| s.t_s > 0.0).unwrap_or(false) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut counters = Vec::new();
        for (listener, svc, name) in servers {
            let c = Arc::new(ServerCounters::default());
            counters.push(c.clone());
            tasks.push(tokio::spawn(serve_device(listener, svc, limits, c, name)));
        }
        Ok(Self {
            counters,
            endpoints,
            images,
            shared,
            tasks,
        })
    }

    /// The Modbus devices and their addresses.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// Make a device stop answering (or answer again), as a CDU whose controller hangs.
    pub fn set_online(&self, role: Role, index: usize, online: bool) {
        for (r, i, img) in &self.images {
            if *r == role && *i == index {
                if let Ok(mut im) = img.lock() {
                    im.forced_offline = !online;
                    im.online = online;
                }
            }
        }
    }

    /// KPIs the plant computed so far (scored window).
    pub fn kpis(&self) -> Option<Kpis> {
        self.shared.lock().ok().and_then(|s| s.kpis.clone())
    }

    /// Plant time, s.
    pub fn plant_time_s(&self) -> f64 {
        self.shared.lock().map(|s| s.t_s).unwrap_or(0.0)
    }

    /// The plant's latest measurements (what its sensors report).
    pub fn last_measurements(&self) -> Option<Measurements> {
        self.shared.lock().ok().and_then(|s| s.last.clone())
    }

    /// Rack telemetry messages published so far.
    pub fn telemetry_published(&self) -> u64 {
        self.shared.lock().map(|s| s.telemetry_published).unwrap_or(0)
    }

    /// Rack telemetry messages not sent because the broker was not connected.
    pub fn telemetry_not_sent(&self) -> u64 {
        self.shared.lock().map(|s| s.telemetry_not_sent).unwrap_or(0)
    }

    /// Modbus requests served and exceptions answered, over all devices.
    pub fn modbus_counters(&self) -> (u64, u64) {
        self.images.iter().fold((0, 0), |(r, e), (_, _, img)| match img.lock() {
            Ok(im) => (r + im.requests, e + im.exceptions),
            Err(_) => (r, e),
        })
    }

    /// Counters of the devices' Modbus servers (accept errors, refused and idle connections,
    /// requests for another unit id), over all devices.
    pub fn server_stats(&self) -> ServerStats {
        let mut st = ServerStats::default();
        for c in &self.counters {
            st.accept_errors += c.accept_errors.load(Ordering::Relaxed);
            st.connections_refused += c.refused.load(Ordering::Relaxed);
            st.idle_closed += c.idle_closed.load(Ordering::Relaxed);
        }
        for (_, _, img) in &self.images {
            if let Ok(im) = img.lock() {
                st.wrong_unit += im.wrong_unit;
            }
        }
        st
    }

    /// Stop serving.
    pub fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for SimWire {
    fn drop(&mut self) {
        self.stop();
    }
}

fn unix_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn update_images(images: &[(Role, usize, Arc<Mutex<DeviceImage>>)], m: &Measurements) {
    for (role, index, img) in images {
        let Ok(mut im) = img.lock() else { continue };
        match role {
            Role::Cdu => {
                let Some(c) = m.cdus.get(*index) else { continue };
                // A CDU the plant reports as silent (offline fault, comms loss) stops answering.
                let plant_ok = c.supply_temp_c.quality != Quality::Bad || c.supply_temp_c.t_s >= m.t_s;
                im.online = plant_ok && !im.forced_offline;
                let v =
                    |r: coolplane_core::signals::Reading| if r.quality == Quality::Good { r.value } else { f64::NAN };
                for (name, r) in [
                    ("supply_temp_c", c.supply_temp_c),
                    ("return_temp_c", c.return_temp_c),
                    ("flow_lpm", c.flow_lpm),
                    ("facility_in_temp_c", c.facility_in_temp_c),
                    ("heat_kw", c.heat_kw),
                    ("pump_speed_pct", c.pump_speed_pct),
                    ("valve_pct", c.valve_pct),
                    ("pump_power_kw", c.pump_power_kw),
                    ("supply_setpoint_active_c", c.supply_setpoint_c),
                    ("flow_setpoint_active_lpm", c.flow_setpoint_lpm),
                    ("supply_temp_f32_c", c.supply_temp_c),
                    ("return_temp_f32_c", c.return_temp_c),
                    ("flow_f32_lpm", c.flow_lpm),
                    ("heat_f32_kw", c.heat_kw),
                    ("pump_power_f32_kw", c.pump_power_kw),
                ] {
                    im.set(name, v(r));
                }
                im.set("alarms", c.alarms as f64);
                im.set("local_fallback", if c.local_fallback { 1.0 } else { 0.0 });
                if let Some(t) = &c.tank {
                    im.set("tank_pressure_gauge_kpa", v(t.pressure_gauge_kpa));
                    im.set("tank_pool_temp_c", v(t.pool_temp_c));
                    im.set("tank_fluid_level_pct", v(t.fluid_level_pct));
                    im.set("tank_venting", if t.venting { 1.0 } else { 0.0 });
                }
            }
            Role::Facility => {
                let Some(f) = m.facilities.get(*index) else { continue };
                let v =
                    |r: coolplane_core::signals::Reading| if r.quality == Quality::Good { r.value } else { f64::NAN };
                for (name, r) in [
                    ("supply_temp_c", f.supply_temp_c),
                    ("return_temp_c", f.return_temp_c),
                    ("flow_lpm", f.flow_lpm),
                    ("supply_setpoint_active_c", f.supply_setpoint_c),
                    ("fan_speed_pct", f.fan_speed_pct),
                    ("fan_power_kw", f.fan_power_kw),
                    ("pump_power_kw", f.pump_power_kw),
                    ("chiller_power_kw", f.chiller_power_kw),
                    ("heat_pump_power_kw", f.heat_pump_power_kw),
                    ("outdoor_dry_bulb_c", f.outdoor_dry_bulb_c),
                    ("outdoor_wet_bulb_c", f.outdoor_wet_bulb_c),
                ] {
                    im.set(name, v(r));
                }
                im.set("adiabatic_on", if f.adiabatic_on { 1.0 } else { 0.0 });
                im.set("chiller_on", if f.chiller_on { 1.0 } else { 0.0 });
                im.set("local_fallback", if f.local_fallback { 1.0 } else { 0.0 });
                im.set(
                    "rejection_mode_active",
                    f.rejection_mode.map_or(f64::NAN, |m| f64::from(m.code())),
                );
            }
            Role::Meter => {
                for (name, r) in [
                    ("facility_power_kw", m.meter.facility_power_kw),
                    ("it_power_kw", m.meter.it_power_kw),
                    ("power_budget_kw", m.meter.power_budget_kw),
                    ("facility_power_u32_kw", m.meter.facility_power_kw),
                    ("it_power_u32_kw", m.meter.it_power_kw),
                    ("power_budget_u32_kw", m.meter.power_budget_kw),
                ] {
                    im.set(name, r.value);
                }
            }
        }
    }
}

/// A simulated Modbus device without a socket: the request handling a served device runs, for
/// fuzzing and tests. Not part of the supported API.
#[doc(hidden)]
pub struct DeviceUnderTest(DeviceService);

#[doc(hidden)]
impl DeviceUnderTest {
    /// A device serving one of the shipped maps ([`CDU_MAP`], [`FACILITY_MAP`], [`METER_MAP`],
    /// [`TANK_MAP`]) or any map text; `None` when the map does not parse.
    pub fn new(map_toml: &str) -> Option<Self> {
        let map = RegisterMap::from_toml_str("map", map_toml).ok()?;
        Some(Self::from_map(Arc::new(map)))
    }

    /// A device serving an already parsed map (a fuzz target parses its maps once per process,
    /// and starts every input on a fresh device).
    pub fn from_map(map: Arc<RegisterMap>) -> Self {
        Self(DeviceService {
            image: Arc::new(Mutex::new(DeviceImage::new(map))),
        })
    }

    /// Answer one request addressed to `unit` as the served device does (`Ok(None)`: no answer
    /// at all; a unit id other than the device's own gets the gateway exception).
    pub fn call(&self, unit: u8, req: Request<'static>) -> Result<Option<Response>, ExceptionCode> {
        use tokio_modbus::server::Service as _;
        self.0
            .call(SlaveRequest {
                slave: unit,
                request: req,
            })
            .into_inner()
    }

    /// Accepted writes not yet taken by the plant: (point name, engineering value).
    pub fn pending_writes(&self) -> Vec<(String, f64)> {
        let Ok(img) = self.0.image.lock() else {
            return Vec::new();
        };
        img.writes
            .iter()
            .map(|(i, v)| (img.map.points[*i].name.clone(), *v))
            .collect()
    }
}
