//! Probe 3, alone in its own test process because it lowers the process's file-descriptor
//! limit: a simulated Modbus device whose `accept()` fails (descriptors exhausted) counts and
//! logs the error and serves again once descriptors are free, instead of dying for good.
//!
//! Needs `prlimit` (util-linux) to change this process's limit; skips with a note without it
//! unless `COOLPLANE_REQUIRE_PRLIMIT` is set.

use coolplane_adapters::clock::Clock;
use std::time::Duration;

fn nofile() -> Option<(u64, u64)> {
    let out = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &std::process::id().to_string(),
            "--nofile",
            "--raw",
            "--noheadings",
            "--output=SOFT,HARD",
        ])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    let mut it = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}

fn set_nofile(soft: u64, hard: u64) {
    let st = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &std::process::id().to_string(),
            &format!("--nofile={soft}:{hard}"),
        ])
        .status()
        .unwrap();
    assert!(st.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_survives_accept_errors_when_descriptors_run_out() {
    let Some((soft, hard)) = nofile() else {
        if std::env::var_os("COOLPLANE_REQUIRE_PRLIMIT").is_some() {
            panic!("prlimit is required (COOLPLANE_REQUIRE_PRLIMIT is set)");
        }
        eprintln!("skipped: prlimit (util-linux) is not available");
        return;
    };
    let mut s = coolplane_scenario::spec::ScenarioSpec::default_for_site("hall-10k");
    s.scenario.warmup_h = 0.0;
    s.weather.start_day = Some(180.0);
    s.weather.days = Some(0.1);
    let cfg = coolplane_sim_wire::SimWireConfig {
        scenario: s.resolve(std::path::Path::new(".")).unwrap(),
        step_s: 5.0,
        bind: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        modbus_base_port: 0,
        mqtt: None,
        telemetry_interval_s: 10.0,
        limits_on_arrival: false,
    };
    let sim = coolplane_sim_wire::SimWire::start(cfg, Clock::new(1.0)).await.unwrap();
    let addr = sim.endpoints()[0].addr;
    // Use up every descriptor (files), free one, and take it with a client socket: the
    // connection completes in the kernel's backlog, and the device's accept() has no descriptor.
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    set_nofile(open + 32, hard);
    let mut files = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        files.push(f);
        assert!(files.len() < 10_000);
    }
    files.pop();
    let client = std::net::TcpStream::connect(addr).expect("connect with the last descriptor");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while sim.server_stats().accept_errors == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let errors = sim.server_stats().accept_errors;
    drop(files);
    set_nofile(soft, hard);
    assert!(errors >= 1, "accept() never failed: {:?}", sim.server_stats());
    // Descriptors are free again: the device serves a new client.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    use tokio_modbus::client::Reader;
    let mut ctx = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_modbus::client::tcp::connect_slave(addr, tokio_modbus::Slave(coolplane_sim_wire::UNIT_ID)),
    )
    .await
    .expect("connect in time")
    .expect("the device still accepts after accept() errors");
    drop(client);
    let r = tokio::time::timeout(Duration::from_secs(5), ctx.read_input_registers(0, 1)).await;
    assert!(matches!(r, Ok(Ok(Ok(_)))), "{r:?}");
}
