//! `maps/example-vendor-cdu.toml` with the daemon as shipped: every CDU of the simulated hall
//! serves the vendor's map over Modbus TCP (holding registers only, "40001" numbering, 16
//! registers per read, single-register writes), the daemon is configured with the same file, and
//! the loop runs: the daemon reads every CDU fresh, its setpoints and heartbeats reach the plant
//! (no CDU falls back to its local defaults), nothing is refused. The map as it was shaped before
//! (the watchdog under the manual's name, no flow setpoint) is refused at start-up, naming the
//! heartbeat.

use coolplane_adapters::clock::Clock;
use coolplane_adapters::regmap::RegisterMap;
use coolplane_controller::Mode;
use coolplane_core::signals::Quality;
use coolplane_runtime::{Daemon, DaemonConfig, DaemonReport, DaemonSection, DeviceRole, DeviceSection, MqttSection};
use coolplane_scenario::spec::ScenarioSpec;
use coolplane_sim_wire::{Role, ServerLimits, SimWire, SimWireConfig};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const VENDOR_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../maps/example-vendor-cdu.toml");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn embedded_broker() -> u16 {
    let port = free_port();
    let text = format!(
        "id = 0\n[router]\nid = 0\nmax_connections = 1000\nmax_outgoing_packet_count = 200\nmax_segment_size = 104857600\nmax_segment_count = 10\n[v4.1]\nname = \"v4-1\"\nlisten = \"127.0.0.1:{port}\"\nnext_connection_delay_ms = 1\n[v4.1.connections]\nconnection_timeout_ms = 60000\nmax_payload_size = 4194304\nmax_inflight_count = 100\ndynamic_filters = true\n"
    );
    let config: rumqttd::Config = toml::from_str(&text).unwrap();
    let mut broker = rumqttd::Broker::new(config);
    std::thread::spawn(move || {
        let _ = broker.start();
    });
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return port;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("embedded broker did not start");
}

/// The daemon's configuration for the simulated devices, the CDUs on the map file `cdu_map`.
fn config(sim: &SimWire, mqtt_port: u16, cdu_map: &str) -> DaemonConfig {
    DaemonConfig {
        daemon: DaemonSection {
            site: "hall-10k".into(),
            policy: "trim-respond".into(),
            tick_s: 10.0,
            speed: 120.0,
        },
        controller: Default::default(),
        mqtt: Some(MqttSection {
            allow_unauthenticated_commands: true,
            ..MqttSection::new("127.0.0.1", mqtt_port, &format!("vendor-{}", free_port()))
        }),
        devices: sim
            .endpoints()
            .iter()
            .map(|e| {
                let role = match e.role {
                    Role::Cdu => DeviceRole::Cdu,
                    Role::Facility => DeviceRole::Facility,
                    Role::Meter => DeviceRole::Meter,
                };
                let mut d = DeviceSection {
                    timeout_ms: 200,
                    backoff_ms: 100,
                    backoff_max_ms: 1_000,
                    ..DeviceSection::builtin(role, e.index, e.addr, 5.0)
                };
                if role == DeviceRole::Cdu {
                    d.map = cdu_map.to_string();
                }
                d
            })
            .collect(),
        api: None,
        history: None,
        web: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vendor_example_map_runs_with_the_daemon_as_shipped() {
    let text = std::fs::read_to_string(VENDOR_PATH).unwrap();
    let map = Arc::new(RegisterMap::from_toml_str("example-vendor-cdu.toml", &text).unwrap());
    let mut s = ScenarioSpec::default_for_site("hall-10k");
    s.scenario.warmup_h = 0.0;
    s.scenario.step_s = 5.0;
    s.weather.start_day = Some(180.0);
    s.weather.days = Some(1.0);
    let scenario = s.resolve(Path::new(".")).unwrap();
    let port = embedded_broker();
    let clock = Clock::new(120.0);
    let sim = SimWire::start_with_cdu_map(
        SimWireConfig {
            scenario,
            step_s: 5.0,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            modbus_base_port: 0,
            mqtt: Some(("127.0.0.1".into(), port)),
            telemetry_interval_s: 10.0,
            limits_on_arrival: true,
        },
        ServerLimits::default(),
        clock,
        Some(("example-vendor-cdu.toml".into(), map)),
    )
    .await
    .unwrap();
    let cdus: Vec<_> = sim.endpoints().iter().filter(|e| e.role == Role::Cdu).collect();
    assert_eq!(cdus.len(), 12);
    assert!(cdus.iter().all(|e| e.map == "example-vendor-cdu.toml"));

    // The map as it was: the watchdog under the manual's name and no flow setpoint. The daemon
    // refuses it, naming what it would have written to nowhere.
    let dir = std::env::temp_dir().join(format!("coolplane-vendor-map-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let old = text
        .replace("name = \"heartbeat\"", "name = \"bms_watchdog\"")
        .replace("name = \"flow_setpoint_lpm\"", "name = \"flow_setpoint_x_lpm\"");
    std::fs::write(dir.join("old-vendor.toml"), old).unwrap();
    let e = Daemon::new(&config(&sim, port, "old-vendor.toml"), &dir, "test", clock)
        .err()
        .expect("the old shape is refused")
        .to_string();
    assert!(
        e.contains("device[0].map") && e.contains("`heartbeat` (writable)") && e.contains("`flow_setpoint_lpm`"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    // The shipped file, as an operator's configuration names it.
    let mut d = Daemon::new(&config(&sim, port, VENDOR_PATH), Path::new("."), "test", clock).unwrap();
    let mut rep = DaemonReport::default();
    // Past the CDUs' BMS timeout (120 s on hall-10k) several times over.
    while clock.now_s() < 1200.0 {
        tokio::time::sleep(clock.wall(10.0)).await;
        d.tick(&mut rep);
    }
    let st = rep.last.clone().unwrap();
    assert_eq!(st.mode, Mode::Auto, "{:?}", d.controller().mode());
    assert_eq!(st.devices_bad, 0);
    assert_eq!(rep.refused, 0, "no write refused (an unknown point would be)");
    assert!(rep.writes > 0, "setpoints were written");

    // Fresh readings of every CDU, through the vendor's registers.
    let now = clock.now_s();
    let m = d.wire().measurements(now);
    for (c, cm) in m.cdus.iter().enumerate() {
        for (name, r) in [
            ("supply_temp_c", cm.supply_temp_c),
            ("return_temp_c", cm.return_temp_c),
            ("flow_lpm", cm.flow_lpm),
            ("facility_in_temp_c", cm.facility_in_temp_c),
            ("heat_kw", cm.heat_kw),
            ("valve_pct", cm.valve_pct),
        ] {
            assert_eq!(r.quality, Quality::Good, "CDU {c} {name}: {r:?}");
            assert!(now - r.t_s <= 20.0, "CDU {c} {name} is {} s old", now - r.t_s);
        }
        assert!(cm.supply_temp_c.value > 20.0 && cm.supply_temp_c.value < 50.0, "{cm:?}");
        assert!(cm.flow_lpm.value > 500.0, "{cm:?}");
        // What this device does not have reads as bad, not as 0.
        assert_eq!(cm.supply_setpoint_c.quality, Quality::Bad);
        assert!(cm.supply_setpoint_c.value.is_nan());
    }
    for h in d.wire().cdus.iter().flatten() {
        let s = h.status();
        assert!(s.connected && s.polls > 10, "{s:?}");
        assert_eq!(
            s.transport_errors + s.timeouts + s.exceptions + s.implausible + s.write_failures,
            0,
            "{s:?}"
        );
        assert!(s.writes > 0, "{s:?}");
    }

    // The heartbeat reaches the plant: no CDU runs on its local defaults, and each runs the
    // supply setpoint the controller wrote (within one tick's rate limit).
    let plant = sim.last_measurements().unwrap();
    assert!(
        plant.cdus.iter().all(|c| !c.local_fallback),
        "a CDU timed out the supervisor"
    );
    assert_eq!(
        plant.cdus[0].alarms & coolplane_core::signals::cdu_alarm::BMS_TIMEOUT,
        0
    );
    for (c, pc) in plant.cdus.iter().enumerate() {
        let wrote = d.controller().setpoints().cdus[c].supply_c;
        assert!(
            (pc.supply_setpoint_c.value - wrote).abs() <= 1.0 + 1e-9,
            "CDU {c}: runs {} °C, the controller wrote {wrote} °C",
            pc.supply_setpoint_c.value
        );
    }
    sim.stop();
}
