//! Regression tests of the reliability probes: each hostile or broken input on the wire or in a
//! configuration becomes a clear error or a counted, logged rejection, with nothing lost and
//! nothing unsafe applied.

use coolplane_adapters::clock::Clock;
use coolplane_adapters::mqtt::{MqttConfig, MqttLink};
use coolplane_adapters::telemetry::{encode_rack_telemetry, RackTelemetry, TempReport, Topics};
use rumqttc::{AsyncClient, MqttOptions, QoS};
use std::net::TcpListener;
use std::time::Duration;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// An embedded broker (rumqttd) that accepts payloads of up to 16 MiB.
fn big_broker() -> u16 {
    let port = free_port();
    let text = format!(
        "id = 0\n[router]\nid = 0\nmax_connections = 100\nmax_outgoing_packet_count = 200\nmax_segment_size = 104857600\nmax_segment_count = 10\n[v4.1]\nname = \"v4-1\"\nlisten = \"127.0.0.1:{port}\"\nnext_connection_delay_ms = 1\n[v4.1.connections]\nconnection_timeout_ms = 60000\nmax_payload_size = 16777216\nmax_inflight_count = 100\ndynamic_filters = true\n"
    );
    let config: rumqttd::Config = toml::from_str(&text).unwrap();
    let mut broker = rumqttd::Broker::new(config);
    std::thread::spawn(move || {
        let _ = broker.start();
    });
    for _ in 0..300 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return port;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("embedded broker did not start");
}

fn unix_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn telemetry(rack: &str, gpus: usize, ts_unix_ms: i64) -> Vec<u8> {
    let t = RackTelemetry {
        ts_unix_ms,
        rack: rack.into(),
        seq: 1,
        it_power_kw: 50.0,
        inlet_temp_c: 30.0,
        outlet_temp_c: 40.0,
        gpu_power_w: vec![500.0; gpus],
        gpu_util: vec![0.5; gpus],
        gpu_power_limit_w: vec![700.0; gpus],
        gpu_temp_c: vec![60.0; gpus],
        gpu_clock_events: vec![0; gpus],
        temps_were_margins: false,
    };
    encode_rack_telemetry(&t, TempReport::Absolute, 87.0)
}

async fn publisher(port: u16, id: &str) -> AsyncClient {
    let mut opts = MqttOptions::new(id, "127.0.0.1", port);
    opts.set_max_packet_size(16 << 20, 16 << 20);
    let (client, mut ev) = AsyncClient::new(opts, 64);
    tokio::spawn(async move {
        loop {
            if ev.poll().await.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    client
}

async fn wait_for(mut f: impl FnMut() -> bool, secs: f64) -> bool {
    let end = std::time::Instant::now() + Duration::from_secs_f64(secs);
    while std::time::Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}

/// Probe 1: a 5 MB retained message on one rack's topic (and a 7 MB live one) is a counted,
/// logged `too_large` rejection; the link stays up (one connect, no connection errors) and the
/// other racks' telemetry is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_retained_message_is_rejected_without_dropping_the_link() {
    let port = big_broker();
    let site = "probe1";
    let topics = Topics::new(site);
    let pubc = publisher(port, "probe1-pub").await;
    pubc.publish(
        topics.rack_telemetry("r0"),
        QoS::AtLeastOnce,
        true,
        vec![b' '; 5_000_000],
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cfg = MqttConfig::new(
        "127.0.0.1",
        port,
        "probe1-link",
        site,
        vec!["r0".into(), "r1".into()],
        vec![4, 4],
        87.0,
    );
    let link = MqttLink::start(cfg, Clock::new(1.0));
    assert!(
        wait_for(|| link.stats().rejected.get("too_large") == Some(&1), 10.0).await,
        "{:?}",
        link.stats()
    );
    pubc.publish(
        topics.rack_telemetry("r1"),
        QoS::AtLeastOnce,
        false,
        vec![b'x'; 7_000_000],
    )
    .await
    .unwrap();
    for _ in 0..5 {
        pubc.publish(
            topics.rack_telemetry("r1"),
            QoS::AtLeastOnce,
            false,
            telemetry("r1", 4, unix_ms_now()),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        wait_for(
            || link.latest()[1].is_some() && link.stats().rejected.get("too_large") == Some(&2),
            10.0
        )
        .await,
        "{:?}",
        link.stats()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = link.stats();
    assert_eq!(st.connects, 1, "the link must not reconnect: {st:?}");
    assert_eq!(st.connection_errors, 0, "{st:?}");
    assert!(st.accepted >= 1, "{st:?}");
    assert!(
        link.latest()[0].is_none(),
        "the oversize message must not count as telemetry"
    );
}

/// A Modbus TCP device for tests: 200 holding and input registers, counts the writes it gets.
#[derive(Clone, Default)]
struct CountingDevice {
    regs: std::sync::Arc<std::sync::Mutex<(Vec<u16>, u64)>>,
}

impl tokio_modbus::server::Service for CountingDevice {
    type Request = tokio_modbus::Request<'static>;
    type Response = Option<tokio_modbus::Response>;
    type Exception = tokio_modbus::ExceptionCode;
    type Future = std::future::Ready<Result<Self::Response, Self::Exception>>;

    fn call(&self, req: Self::Request) -> Self::Future {
        use tokio_modbus::{Request, Response};
        let mut g = self.regs.lock().unwrap();
        if g.0.is_empty() {
            g.0 = vec![0; 200];
        }
        let r = match req {
            Request::ReadInputRegisters(_, n) => Response::ReadInputRegisters(vec![0; n as usize]),
            Request::ReadHoldingRegisters(a, n) => {
                Response::ReadHoldingRegisters(g.0[a as usize..(a + n) as usize].to_vec())
            }
            Request::WriteSingleRegister(a, w) => {
                g.0[a as usize] = w;
                g.1 += 1;
                Response::WriteSingleRegister(a, w)
            }
            Request::WriteMultipleRegisters(a, ws) => {
                g.0[a as usize..a as usize + ws.len()].copy_from_slice(&ws);
                g.1 += 1;
                Response::WriteMultipleRegisters(a, ws.len() as u16)
            }
            _ => return std::future::ready(Err(tokio_modbus::ExceptionCode::IllegalFunction)),
        };
        std::future::ready(Ok(Some(r)))
    }
}

async fn serve_counting(listener: tokio::net::TcpListener, dev: CountingDevice) {
    let server = tokio_modbus::server::tcp::Server::new(listener);
    let on_connected = move |stream, socket_addr| {
        let dev = dev.clone();
        async move { tokio_modbus::server::tcp::accept_tcp_connection(stream, socket_addr, move |_| Ok(Some(dev.clone()))) }
    };
    let _ = server.serve(&on_connected, |_err| {}).await;
}

fn cdu_map() -> std::sync::Arc<coolplane_adapters::regmap::RegisterMap> {
    std::sync::Arc::new(
        coolplane_adapters::regmap::RegisterMap::from_toml_str("coolplane-cdu.toml", coolplane_sim_wire::CDU_MAP)
            .unwrap(),
    )
}

/// Probe 2: writes queued while a device is away are not replayed after it returns: the latest
/// value per point wins, superseded writes are dropped and counted, and the waiting set is
/// bounded by the map's size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_queued_during_an_outage_are_superseded_not_replayed() {
    use coolplane_adapters::modbus::{spawn_device, DeviceConfig};
    let port = free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut dc = DeviceConfig::new("cdu-probe2", addr, 1, cdu_map(), 0.2);
    dc.timeout = Duration::from_millis(200);
    dc.backoff_initial = Duration::from_millis(100);
    dc.backoff_max = Duration::from_millis(200);
    let h = spawn_device(dc, Clock::new(1.0));
    // The device is away: 191 writes, setpoints and heartbeats interleaved, as ticks produce them.
    let mut n = 0;
    for k in 0..96u32 {
        let queue = |point: &str, v: f64| {
            // The client's channel refuses when full (back-pressure): retry, as the next tick would.
            for _ in 0..1000 {
                if h.write(point, v).is_ok() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            panic!("write queue stayed full");
        };
        queue("supply_setpoint_c", 30.0 + (k % 10) as f64 * 0.5);
        n += 1;
        if n < 191 {
            queue("heartbeat", k as f64);
            n += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(n, 191);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dev = CountingDevice::default();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(serve_counting(listener, dev.clone()));
    assert!(wait_for(|| h.status().polls >= 3, 10.0).await, "{:?}", h.status());
    let writes = dev.regs.lock().unwrap().1;
    let st = h.status();
    assert_eq!(writes, 2, "only the latest setpoint and heartbeat may go out: {st:?}");
    assert_eq!(st.writes_superseded, 189, "{st:?}");
    let regs = dev.regs.lock().unwrap().0.clone();
    assert_eq!(regs[0], 325, "the last setpoint (32.5 °C) was written");
    assert_eq!(regs[2], 94, "the last heartbeat was written");
}

fn small_scenario() -> coolplane_scenario::Scenario {
    let mut s = coolplane_scenario::spec::ScenarioSpec::default_for_site("hall-10k");
    s.scenario.warmup_h = 0.0;
    s.scenario.step_s = 5.0;
    s.weather.start_day = Some(180.0);
    s.weather.days = Some(0.1);
    s.resolve(std::path::Path::new(".")).unwrap()
}

async fn sim(limits: coolplane_sim_wire::ServerLimits) -> coolplane_sim_wire::SimWire {
    let cfg = coolplane_sim_wire::SimWireConfig {
        scenario: small_scenario(),
        step_s: 5.0,
        bind: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        modbus_base_port: 0,
        mqtt: None,
        telemetry_interval_s: 10.0,
        limits_on_arrival: false,
    };
    coolplane_sim_wire::SimWire::start_with(cfg, limits, Clock::new(1.0))
        .await
        .unwrap()
}

/// Probe 3: a simulated device answers only its own unit id (others get exception 0x0B), and a
/// client configured with a wrong unit id sees the device as failing and its values go bad.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_unit_id_gets_no_answer_and_the_device_shows_bad() {
    use coolplane_adapters::modbus::{spawn_device, DeviceConfig};
    use coolplane_core::signals::Quality;
    use tokio_modbus::client::Reader;
    let sim = sim(Default::default()).await;
    let cdu = sim.endpoints()[0].clone();
    // Raw request on unit 7: exception 0x0B, not an answer.
    let mut ctx = tokio_modbus::client::tcp::connect_slave(cdu.addr, tokio_modbus::Slave(7))
        .await
        .unwrap();
    let r = ctx.read_input_registers(0, 1).await.unwrap();
    assert_eq!(r, Err(tokio_modbus::ExceptionCode::GatewayTargetDevice));
    let mut ok = tokio_modbus::client::tcp::connect_slave(cdu.addr, tokio_modbus::Slave(coolplane_sim_wire::UNIT_ID))
        .await
        .unwrap();
    assert!(ok.read_input_registers(0, 1).await.unwrap().is_ok());
    // The client with the wrong unit id: failures counted, values bad.
    let mut dc = DeviceConfig::new("cdu-wrong-unit", cdu.addr, 7, cdu_map(), 0.2);
    dc.timeout = Duration::from_millis(300);
    dc.backoff_initial = Duration::from_millis(50);
    dc.backoff_max = Duration::from_millis(100);
    let h = spawn_device(dc, Clock::new(1.0));
    assert!(
        wait_for(|| h.status().consecutive_failures >= 3, 10.0).await,
        "{:?}",
        h.status()
    );
    let st = h.status();
    assert!(st.last_error.as_deref().unwrap_or("").contains("unit 7"), "{st:?}");
    assert_eq!(h.point("supply_temp_c").unwrap().quality, Quality::Bad);
    assert!(sim.server_stats().wrong_unit >= 3, "{:?}", sim.server_stats());
}

/// Probe 3: connections beyond the per-device cap are closed at once and counted; a connection
/// that sends half a frame and stops is closed after the idle timeout and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_capped_and_a_half_frame_is_timed_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sim = sim(coolplane_sim_wire::ServerLimits {
        max_connections: 3,
        idle_timeout: Duration::from_millis(500),
    })
    .await;
    let addr = sim.endpoints()[0].addr;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(&[0, 1, 0]).await.unwrap(); // half an MBAP header
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut extra = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(2), extra.read(&mut buf)).await;
    assert!(
        matches!(n, Ok(Ok(0)) | Ok(Err(_))),
        "the 4th connection must be closed: {n:?}"
    );
    assert!(sim.server_stats().connections_refused >= 1, "{:?}", sim.server_stats());
    // The half frames are cut off after the idle timeout.
    for s in &mut held {
        let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await;
        assert!(
            matches!(n, Ok(Ok(0)) | Ok(Err(_))),
            "a half frame must not hold a connection: {n:?}"
        );
    }
    assert!(
        wait_for(|| sim.server_stats().idle_closed >= 3, 3.0).await,
        "{:?}",
        sim.server_stats()
    );
    // Slots are given back: a new client is served.
    use tokio_modbus::client::Reader;
    let mut ctx = tokio_modbus::client::tcp::connect_slave(addr, tokio_modbus::Slave(1))
        .await
        .unwrap();
    assert!(ctx.read_input_registers(0, 1).await.unwrap().is_ok());
}

/// Probe 5: a reading outside its point's plausible range (a CDU answering 0x7FFE = 3,276.6 °C)
/// is bad and counted, not a good reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_implausible_register_value_is_bad_and_counted() {
    use coolplane_adapters::modbus::{spawn_device, DeviceConfig};
    use coolplane_core::signals::Quality;
    let dev = CountingDevice::default();
    dev.regs.lock().unwrap().0 = vec![0; 200];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Input registers: this device answers 0x7FFE in every input register.
    let dev2 = InputDevice {
        word: 0x7FFE,
        inner: dev,
    };
    tokio::spawn(async move {
        let server = tokio_modbus::server::tcp::Server::new(listener);
        let on_connected = move |stream, socket_addr| {
            let d = dev2.clone();
            async move {
                tokio_modbus::server::tcp::accept_tcp_connection(stream, socket_addr, move |_| Ok(Some(d.clone())))
            }
        };
        let _ = server.serve(&on_connected, |_err| {}).await;
    });
    let mut dc = DeviceConfig::new("cdu-7ffe", addr, 1, cdu_map(), 0.2);
    dc.timeout = Duration::from_millis(300);
    let h = spawn_device(dc, Clock::new(1.0));
    assert!(wait_for(|| h.status().polls >= 2, 10.0).await, "{:?}", h.status());
    let p = h.point("supply_temp_c").unwrap();
    assert!((p.value - 3276.6).abs() < 1e-6, "{p:?}");
    assert_eq!(p.quality, Quality::Bad, "3,276.6 °C is not a good reading");
    assert!(h.status().implausible >= 1, "{:?}", h.status());
    // A plausible reading on the same link stays good (u16 heartbeat echo has no range).
    assert_eq!(h.point("heartbeat_echo").unwrap().quality, Quality::Good);
}

#[derive(Clone)]
struct InputDevice {
    word: u16,
    inner: CountingDevice,
}

impl tokio_modbus::server::Service for InputDevice {
    type Request = tokio_modbus::Request<'static>;
    type Response = Option<tokio_modbus::Response>;
    type Exception = tokio_modbus::ExceptionCode;
    type Future = std::future::Ready<Result<Self::Response, Self::Exception>>;

    fn call(&self, req: Self::Request) -> Self::Future {
        match req {
            tokio_modbus::Request::ReadInputRegisters(_, n) => {
                std::future::ready(Ok(Some(tokio_modbus::Response::ReadInputRegisters(vec![
                    self.word;
                    n as usize
                ]))))
            }
            other => self.inner.call(other),
        }
    }
}

/// Probe 5: telemetry whose `rack` differs from its topic, or stamped in 1970 (a ghost rack's
/// retained message), or far in the future, is rejected and counted; fresh telemetry is accepted
/// with its sample time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_with_a_wrong_rack_or_time_stamp_is_rejected() {
    let port = big_broker();
    let site = "probe5";
    let topics = Topics::new(site);
    let pubc = publisher(port, "probe5-pub").await;
    // A retained message from 1970 on r0.
    pubc.publish(
        topics.rack_telemetry("r0"),
        QoS::AtLeastOnce,
        true,
        telemetry("r0", 4, 0),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cfg = MqttConfig::new(
        "127.0.0.1",
        port,
        "probe5-link",
        site,
        vec!["r0".into(), "r1".into()],
        vec![4, 4],
        87.0,
    );
    let link = MqttLink::start(cfg, Clock::new(1.0));
    assert!(
        wait_for(|| link.stats().rejected.get("timestamp_old") == Some(&1), 10.0).await,
        "{:?}",
        link.stats()
    );
    let now = unix_ms_now();
    pubc.publish(
        topics.rack_telemetry("r1"),
        QoS::AtLeastOnce,
        false,
        telemetry("r0", 4, now),
    )
    .await
    .unwrap();
    pubc.publish(
        topics.rack_telemetry("r1"),
        QoS::AtLeastOnce,
        false,
        telemetry("r1", 4, now + 3_600_000),
    )
    .await
    .unwrap();
    assert!(
        wait_for(
            || {
                let st = link.stats();
                st.rejected.get("rack_mismatch") == Some(&1) && st.rejected.get("timestamp_future") == Some(&1)
            },
            10.0
        )
        .await,
        "{:?}",
        link.stats()
    );
    assert!(link.latest().iter().all(Option::is_none), "nothing was accepted");
    pubc.publish(
        topics.rack_telemetry("r1"),
        QoS::AtLeastOnce,
        false,
        telemetry("r1", 4, now - 2_000),
    )
    .await
    .unwrap();
    assert!(
        wait_for(|| link.latest()[1].is_some(), 10.0).await,
        "{:?}",
        link.stats()
    );
    assert_eq!(link.stats().accepted, 1);
}

/// Probe 6: a register map without a point its role needs, or a built-in map of another role,
/// is a configuration error naming the device and the point, not a CDU silently run on design
/// setpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_missing_a_required_point_or_of_the_wrong_role_is_refused() {
    use coolplane_runtime::{Daemon, DaemonConfig};
    let dir = std::env::temp_dir().join(format!("coolplane-probe6-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let no_supply = coolplane_sim_wire::CDU_MAP.replacen("name = \"supply_temp_c\"", "name = \"supply_temp_x\"", 1);
    std::fs::write(dir.join("cdu.toml"), no_supply).unwrap();
    let cfg = |map: &str| {
        format!(
            "[daemon]\nsite = \"hall-10k\"\nspeed = 1.0\n\n[[device]]\nrole = \"cdu\"\nindex = 0\naddress = \"127.0.0.1:24995\"\nmap = \"{map}\"\n"
        )
    };
    for (map, expect) in [
        ("cdu.toml", "`supply_temp_c`"),
        ("builtin:coolplane-facility", "is the map of a Facility device"),
        ("builtin:coolplane-meter", "is the map of a Meter device"),
    ] {
        let c = DaemonConfig::from_toml_str("d.toml", &cfg(map)).unwrap();
        let e = Daemon::new(&c, &dir, "d.toml", Clock::new(1.0))
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("device[0].map") && e.contains(expect), "{map}: {e}");
    }
    let c = DaemonConfig::from_toml_str("d.toml", &cfg("builtin:coolplane-cdu")).unwrap();
    assert!(Daemon::new(&c, &dir, "d.toml", Clock::new(1.0)).is_ok());
    // A two-phase immersion tank's skid needs the tank's pressure: the plain CDU map is refused
    // there, the tank map accepted.
    let tank = |map: &str| cfg(map).replace("site = \"hall-10k\"", "site = \"supernode-2pic\"");
    let c = DaemonConfig::from_toml_str("d.toml", &tank("builtin:coolplane-cdu")).unwrap();
    let e = Daemon::new(&c, &dir, "d.toml", Clock::new(1.0))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("device[0].map") && e.contains("`tank_pressure_gauge_kpa`"),
        "{e}"
    );
    let c = DaemonConfig::from_toml_str("d.toml", &tank("builtin:coolplane-2pic-tank")).unwrap();
    assert!(Daemon::new(&c, &dir, "d.toml", Clock::new(1.0)).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}
