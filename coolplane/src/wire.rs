//! `coolplane demo`, `coolplane run --config` and `coolplane sim-plant serve`: the loop closed
//! over real protocols (Modbus TCP and MQTT).

use anyhow::{bail, Context, Result};
use clap::Args;
use coolplane_adapters::clock::Clock;
use coolplane_runtime::{
    Daemon, DaemonConfig, DaemonReport, DaemonSection, DeviceRole, DeviceSection, MqttSection, TickStatus,
};
use coolplane_scenario::spec::ScenarioSpec;
use coolplane_scenario::{run, RunOptions, Scenario};
use coolplane_sim_plant::kpi::Kpis;
use coolplane_sim_wire::{Role, SimWire, SimWireConfig};
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Options of the simulated plant (shared by `demo` and `sim-plant serve`).
#[derive(Args, Clone, Debug)]
pub struct SimArgs {
    /// Built-in site or site file.
    #[arg(long, default_value = "hall-10k")]
    pub site: String,
    /// `synthetic` or an EnergyPlus .epw file.
    #[arg(long, default_value = "synthetic")]
    pub weather: String,
    /// Day of the weather year to start on (0-based).
    #[arg(long, default_value_t = 180.0)]
    pub start_day: f64,
    /// Seed of every random effect.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Plant step, s of plant time.
    #[arg(long, default_value_t = 5.0)]
    pub step: f64,
    /// Plant time runs this many times faster than real time.
    #[arg(long, default_value_t = 60.0)]
    pub speed: f64,
    /// First Modbus TCP port (CDUs, then facility systems, then the meter), on 127.0.0.1;
    /// 0 puts each device on a port the system chooses (the banner and the daemon's
    /// configuration name them).
    #[arg(long, default_value_t = 15020)]
    pub modbus_port: u16,
    /// Rack telemetry period, s of plant time.
    #[arg(long, default_value_t = 10.0)]
    pub telemetry_s: f64,
    /// Rack agents apply a power-limit command at the next plant step (with the plant a step
    /// ahead of the clock) instead of when it arrives. By default they apply it on arrival, as
    /// real ones do within milliseconds (the plant step is split there).
    #[arg(long)]
    pub limits_at_step: bool,
}

/// `value` must be finite and within `lo..=hi`, or the error names the flag and the range.
fn check_flag(flag: &str, value: f64, lo: f64, hi: f64) -> Result<()> {
    if !(value.is_finite() && value >= lo && value <= hi) {
        bail!("{flag} {value}: must be within [{lo}, {hi}]");
    }
    Ok(())
}

impl SimArgs {
    /// Every option within its range (the error names the flag and the range).
    pub fn validate(&self) -> Result<()> {
        check_flag("--speed", self.speed, 0.001, 100_000.0)?;
        check_flag("--step", self.step, 0.1, 600.0)?;
        check_flag("--telemetry-s", self.telemetry_s, 0.1, 3_600.0)?;
        check_flag("--start-day", self.start_day, 0.0, 365.0)?;
        Ok(())
    }

    /// The simulated plant's configuration: devices on 127.0.0.1 from `--modbus-port`.
    fn wire_config(&self, scenario: &Scenario, mqtt: Option<(String, u16)>) -> SimWireConfig {
        SimWireConfig {
            scenario: scenario.clone(),
            step_s: self.step,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            modbus_base_port: self.modbus_port,
            mqtt,
            telemetry_interval_s: self.telemetry_s,
            limits_on_arrival: !self.limits_at_step,
        }
    }
}

/// `coolplane demo`.
#[derive(Args, Clone, Debug)]
pub struct DemoArgs {
    #[command(flatten)]
    sim: SimArgs,
    /// Control policy: vendor-default, trim-respond or coordinated (oracle is refused: it needs the plant's truth).
    #[arg(long, default_value = "trim-respond")]
    policy: String,
    /// Stop after this much plant time (`30m`, `6h`, `1d`, or seconds); Ctrl-C stops earlier.
    #[arg(long, default_value = "1h")]
    duration: String,
    /// MQTT broker: `embedded` (rumqttd on 127.0.0.1:--mqtt-port) or `HOST:PORT` (e.g. a Mosquitto).
    #[arg(long, default_value = "embedded")]
    broker: String,
    /// Port of the embedded broker.
    #[arg(long, default_value_t = 18830)]
    mqtt_port: u16,
    /// Controller tick, s of plant time.
    #[arg(long, default_value_t = 10.0)]
    tick: f64,
    /// Also run the same scenario in process and compare the KPIs.
    #[arg(long)]
    compare: bool,
    /// Print the final KPIs as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Address of the power-budget API (loopback by default).
    #[arg(long, default_value = "127.0.0.1:8080")]
    api_listen: String,
    /// Do not serve the power-budget API.
    #[arg(long)]
    no_api: bool,
    /// Address of the live web page and `/metrics` (loopback by default).
    #[arg(long, default_value = "127.0.0.1:8081")]
    web_listen: String,
    /// Do not serve the live web page.
    #[arg(long)]
    no_web: bool,
    /// Write history to this database's InfluxDB v2 write API (`http://127.0.0.1:8428` for
    /// VictoriaMetrics).
    #[arg(long, value_name = "URL")]
    history: Option<String>,
}

/// Tokens of the demo's API (loopback only; a real daemon takes its tokens from its configuration).
pub const DEMO_TOKENS: [(&str, &str, coolplane_runtime::http::Role); 3] = [
    (
        "demo-operator",
        "demo-operator-token-change-me",
        coolplane_runtime::http::Role::Operator,
    ),
    (
        "demo-scheduler",
        "demo-scheduler-token-change-me",
        coolplane_runtime::http::Role::Scheduler,
    ),
    (
        "demo-viewer",
        "demo-viewer-token-change-me",
        coolplane_runtime::http::Role::Viewer,
    ),
];

/// Bind and serve the budget API of `daemon` until `stop` fires; prints where.
async fn start_api(
    daemon: &Daemon,
    listen: &str,
    site: &str,
    demo_token: Option<&str>,
    quiet_stdout: bool,
) -> Result<Option<(tokio::task::JoinHandle<()>, tokio::sync::oneshot::Sender<()>)>> {
    let Some(state) = daemon.api() else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding the budget API to {listen} (choose another with --api-listen)"))?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        if let Err(e) = coolplane_runtime::http::serve(listener, state, async {
            let _ = rx.await;
        })
        .await
        {
            eprintln!("coolplane: budget API stopped: {e}");
        }
    });
    let mut text = format!("coolplane budget API: http://{addr}  (OpenAPI: http://{addr}/openapi.json)\n");
    if let Some(t) = demo_token {
        text.push_str(&format!(
            "  try: curl -s -H 'Authorization: Bearer {t}' http://{addr}/v1/domains/{site}\n"
        ));
    }
    // With --json, stdout carries exactly one JSON object: the address goes to stderr.
    if quiet_stdout {
        eprint!("{text}");
    } else {
        print!("{text}");
        let _ = std::io::stdout().flush();
    }
    Ok(Some((task, tx)))
}

type Served = Option<(tokio::task::JoinHandle<()>, tokio::sync::oneshot::Sender<()>)>;

/// Bind and serve the live web page of `daemon` until `stop` fires; prints where.
async fn start_web(daemon: &Daemon, listen: &str, quiet_stdout: bool) -> Result<Served> {
    let Some(hub) = daemon.web() else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding the web page to {listen} (choose another with --web-listen)"))?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        if let Err(e) = coolplane_runtime::web::serve(listener, hub, async {
            let _ = rx.await;
        })
        .await
        {
            tracing::error!(error = %e, "web page stopped");
        }
    });
    let text = format!("coolplane live page: http://{addr}/  (Prometheus metrics: http://{addr}/metrics)\n");
    if quiet_stdout {
        eprint!("{text}");
    } else {
        print!("{text}");
        let _ = std::io::stdout().flush();
    }
    Ok(Some((task, tx)))
}

async fn stop_api(api: Option<(tokio::task::JoinHandle<()>, tokio::sync::oneshot::Sender<()>)>) {
    if let Some((task, tx)) = api {
        let _ = tx.send(());
        let _ = task.await;
    }
}

/// `coolplane sim-plant serve`.
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    sim: SimArgs,
    /// MQTT broker `HOST:PORT` for rack telemetry (none: Modbus only).
    #[arg(long)]
    mqtt: Option<String>,
    /// Stop after this much plant time; Ctrl-C stops earlier.
    #[arg(long)]
    duration: Option<String>,
    /// Serve every CDU on this register map instead of the shipped one (a third-party map tried
    /// against the plant; two-phase immersion tanks keep theirs). The devices fill the points
    /// whose names the daemon knows (docs/point-names.md) and leave the others at 0.
    #[arg(long, value_name = "FILE")]
    cdu_map: Option<PathBuf>,
    /// When it stops, write the plant's KPIs over the whole run (throttling, energy ledger,
    /// setpoint writes and the largest setpoint move) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    kpis_out: Option<PathBuf>,
}

/// `coolplane run`.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// Daemon configuration (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Stop after this much plant time; Ctrl-C stops earlier.
    #[arg(long)]
    duration: Option<String>,
}

/// Parse `90`, `90s`, `30m`, `6h`, `2d` into seconds.
pub fn parse_duration_s(s: &str) -> Result<f64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 's')) => (&s[..i], 1.0),
        Some((i, 'm')) => (&s[..i], 60.0),
        Some((i, 'h')) => (&s[..i], 3600.0),
        Some((i, 'd')) => (&s[..i], 86_400.0),
        _ => (s, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .with_context(|| format!("duration `{s}`: expected a number with s, m, h or d"))?;
    if !(v.is_finite() && v > 0.0) {
        bail!("duration `{s}` must be positive");
    }
    Ok(v * mult)
}

fn parse_host_port(s: &str) -> Result<(String, u16)> {
    let (h, p) = s
        .rsplit_once(':')
        .with_context(|| format!("`{s}`: expected HOST:PORT"))?;
    let port: u16 = p
        .parse()
        .with_context(|| format!("`{s}`: bad port (expected 1 to 65535)"))?;
    if h.trim().is_empty() {
        bail!("`{s}`: the host is empty (expected HOST:PORT)");
    }
    if port == 0 {
        bail!("`{s}`: port 0 (expected 1 to 65535)");
    }
    Ok((h.to_string(), port))
}

/// Whether a TCP connection to the broker opens within 2 s; the error says why not.
fn broker_reachable(host: &str, port: u16) -> Result<()> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("MQTT broker {host}:{port}: cannot resolve the host"))?
        .collect();
    let mut last = None;
    for a in addrs {
        match std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)) {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => bail!("MQTT broker {host}:{port} is unreachable: {e}"),
        None => bail!("MQTT broker {host}:{port}: the host resolves to no address"),
    }
}

fn scenario_for(sim: &SimArgs, days: f64) -> Result<Scenario> {
    let mut spec = ScenarioSpec::default_for_site(&sim.site);
    spec.scenario.name = "wire".into();
    spec.scenario.seed = sim.seed;
    spec.scenario.step_s = sim.step;
    spec.scenario.warmup_h = 0.0;
    spec.weather.source = sim.weather.clone();
    spec.weather.start_day = Some(sim.start_day);
    spec.weather.days = Some(days.max(1.0 / 86_400.0));
    let cwd = std::env::current_dir()?;
    Ok(spec.resolve(&cwd)?)
}

/// Start the embedded MQTT broker (rumqttd) on 127.0.0.1:`port`; returns once it accepts connections.
pub fn start_embedded_broker(port: u16) -> Result<()> {
    let text = format!(
        r#"id = 0
[router]
id = 0
max_connections = 10010
max_outgoing_packet_count = 200
max_segment_size = 104857600
max_segment_count = 10

[v4.1]
name = "v4-1"
listen = "127.0.0.1:{port}"
next_connection_delay_ms = 1
[v4.1.connections]
connection_timeout_ms = 60000
max_payload_size = 4194304
max_inflight_count = 100
dynamic_filters = true
"#
    );
    let config: rumqttd::Config = toml::from_str(&text).context("embedded broker configuration")?;
    if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        bail!("port 127.0.0.1:{port} is already in use: choose another with --mqtt-port, or use --broker HOST:PORT");
    }
    let mut broker = rumqttd::Broker::new(config);
    std::thread::Builder::new()
        .name("rumqttd".into())
        .spawn(move || {
            if let Err(e) = broker.start() {
                eprintln!("coolplane: embedded MQTT broker stopped: {e}");
            }
        })
        .context("starting the embedded broker thread")?;
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("the embedded MQTT broker did not start listening on 127.0.0.1:{port}")
}

/// A daemon configuration for the devices of a running simulated plant.
pub fn daemon_config_for(
    sim: &SimWire,
    site: &str,
    policy: &str,
    tick_s: f64,
    speed: f64,
    mqtt: Option<(String, u16)>,
) -> DaemonConfig {
    DaemonConfig {
        daemon: DaemonSection {
            site: site.to_string(),
            policy: policy.to_string(),
            tick_s,
            speed,
        },
        controller: Default::default(),
        // The demo's broker is on loopback and anonymous: commands are accepted from anyone on this
        // machine, explicitly (a production daemon needs credentials, see examples/mosquitto/).
        mqtt: mqtt.map(|(host, port)| MqttSection {
            allow_unauthenticated_commands: true,
            ..MqttSection::new(&host, port, &format!("coolplane-{}", std::process::id()))
        }),
        devices: sim
            .endpoints()
            .iter()
            .map(|e| DeviceSection {
                // Each device on the map it serves (a tank's skid: the tank map).
                map: format!("builtin:{}", e.map),
                ..DeviceSection::builtin(device_role(e.role), e.index, e.addr, (tick_s / 2.0).max(1.0))
            })
            .collect(),
        api: None,
        history: None,
        web: None,
    }
}

/// The daemon's name for a simulated device's role.
pub fn device_role(r: Role) -> DeviceRole {
    match r {
        Role::Cdu => DeviceRole::Cdu,
        Role::Facility => DeviceRole::Facility,
        Role::Meter => DeviceRole::Meter,
    }
}

fn status_printer() -> impl FnMut(&TickStatus) {
    let tty = std::io::stderr().is_terminal();
    let mut last_print = -f64::INFINITY;
    move |s: &TickStatus| {
        let h = (s.t_s / 3600.0).floor();
        let m = ((s.t_s - h * 3600.0) / 60.0).floor();
        let line = format!(
            "t {:>3.0}:{:02.0} · mode {:?} · PUE {:.4} · IT {:.2} MW · non-IT {:.0} kW · hottest GPU {:.0} °C / slowdown {:.0} °C · devices bad {} · racks fresh {}/{} · writes {}",
            h,
            m,
            s.mode,
            s.pue(),
            s.it_kw / 1000.0,
            s.facility_kw - s.it_kw,
            s.hottest_gpu_c,
            s.slowdown_c,
            s.devices_bad,
            s.racks_fresh,
            s.racks,
            s.writes
        );
        let twin = if s.twin_calibrated {
            format!(
                " · twin: margin {:.1} K, sensors implausible {}, maintenance {}",
                s.twin_margin_k, s.twin_issues, s.twin_maintenance
            )
        } else {
            format!(
                " · twin: learning {:.0} %, sensors implausible {}",
                s.twin_learning * 100.0,
                s.twin_issues
            )
        };
        let line = line + &twin;
        if tty {
            eprint!("\r{line}   ");
            let _ = std::io::stderr().flush();
        } else if s.t_s - last_print >= 600.0 {
            last_print = s.t_s;
            eprintln!("{line}");
        }
    }
}

/// Ctrl-C (SIGINT) or SIGTERM (what `kill`, systemd and container runtimes send): either stops the
/// run cleanly, with its final report.
async fn stop_signal() {
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {
                        tracing::info!("SIGTERM received: stopping");
                        eprintln!("coolplane: SIGTERM received, stopping");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops cleanly");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn shutdown_after(clock: Clock, duration_s: Option<f64>) {
    match duration_s {
        Some(d) => {
            tokio::select! {
                _ = stop_signal() => {}
                _ = tokio::time::sleep(clock.wall(d - clock.now_s())) => {}
            }
        }
        None => stop_signal().await,
    }
}

fn kpi_lines(k: &Kpis) -> Vec<(&'static str, f64, &'static str)> {
    vec![
        ("PUE", k.pue, ""),
        ("IT energy", k.it_energy_kwh, "kWh"),
        ("facility energy", k.facility_energy_kwh, "kWh"),
        ("cooling energy", k.cooling_energy_kwh, "kWh"),
        ("throttle", k.throttle_gpu_s, "GPU-s"),
        ("GPU shutdowns", k.gpu_shutdowns as f64, ""),
        ("hottest GPU", k.gpu_temp_max_c, "°C"),
        ("energy balance error", k.energy_balance_error_pct, "%"),
        ("supply temp max deviation", k.supply_temp_max_dev_k, "K"),
        ("setpoint writes", k.setpoint_writes as f64, ""),
    ]
}

fn print_report(report: &DaemonReport) {
    let bad: Vec<_> = report
        .devices
        .iter()
        .filter(|(_, s)| s.transport_errors + s.timeouts > 0)
        .collect();
    eprintln!(
        "adapters: {} ticks, {} setpoint writes queued, {} refused; {} devices, {} with transport errors or timeouts",
        report.ticks,
        report.writes,
        report.refused,
        report.devices.len(),
        bad.len()
    );
    let sum =
        |f: fn(&coolplane_adapters::modbus::DeviceStatus) -> u64| report.devices.iter().map(|(_, s)| f(s)).sum::<u64>();
    eprintln!(
        "modbus: {} writes sent, {} superseded before sending (latest value per point), {} write failures, {} exception answers, {} implausible readings (marked bad)",
        sum(|s| s.writes),
        sum(|s| s.writes_superseded),
        sum(|s| s.write_failures),
        sum(|s| s.exceptions),
        sum(|s| s.implausible)
    );
    if let Some(m) = &report.mqtt {
        eprintln!(
            "mqtt: {} rack messages accepted, {} rejected {:?}, {} dropped (queue full), {} connects",
            m.accepted,
            m.rejected.values().sum::<u64>(),
            m.rejected,
            m.dropped_queue_full,
            m.connects
        );
    }
    let o = &report.observed;
    eprintln!(
        "operators: controller events {:?}, stale transitions {}, writes refused {}",
        o.controller_events,
        o.stale_transitions.values().sum::<u64>(),
        o.writes_refused
    );
    if let Some(h) = &report.history {
        eprintln!(
            "history: {} points written in {} batches, {} write errors, {} dropped, {} left on disk for the next start",
            h.points_written, h.batches_written, h.write_errors, h.points_dropped, h.points_spilled
        );
    }
}

/// `coolplane demo`.
pub fn demo(a: &DemoArgs) -> Result<()> {
    a.sim.validate()?;
    check_flag("--tick", a.tick, 0.1, 600.0)?;
    let duration_s = parse_duration_s(&a.duration)?;
    coolplane_policies::by_name(&a.policy)?;
    if coolplane_policies::simulation_only(&a.policy) {
        bail!(
            "--policy {}: a reference that searches copies of the simulated plant's truth; the demo runs the daemon, which never runs it (use `coolplane scenario`)",
            a.policy
        );
    }
    let scenario = scenario_for(&a.sim, duration_s / 86_400.0 + 0.01)?;
    let broker = if a.broker == "embedded" {
        start_embedded_broker(a.mqtt_port)?;
        ("127.0.0.1".to_string(), a.mqtt_port)
    } else {
        let (h, p) = parse_host_port(&a.broker)?;
        broker_reachable(&h, p).context("--broker")?;
        (h, p)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (kpis, report, plant_s, published) = rt.block_on(async {
        let clock = Clock::new(a.sim.speed);
        let sim = SimWire::start(
            a.sim.wire_config(&scenario, Some(broker.clone())),
            clock,
        )
        .await?;
        eprintln!(
            "coolplane demo: {} simulated on {} Modbus TCP devices ({}–{}), racks on MQTT {}:{} ({}), policy {}, {}× real time, {:.1} h of plant time",
            scenario.site.site.name,
            sim.endpoints().len(),
            sim.endpoints().first().map(|e| e.addr.to_string()).unwrap_or_default(),
            sim.endpoints().last().map(|e| e.addr.port().to_string()).unwrap_or_default(),
            broker.0,
            broker.1,
            if a.broker == "embedded" { "embedded rumqttd" } else { "external broker" },
            a.policy,
            a.sim.speed,
            duration_s / 3600.0
        );
        let mut cfg = daemon_config_for(&sim, &a.sim.site, &a.policy, a.tick, a.sim.speed, Some(broker.clone()));
        eprintln!(
            "coolplane demo: operator state on coolplane/v1/{site}/# and Home Assistant discovery on homeassistant/device/+/config; \
             commands on coolplane/v1/{site}/…/set are accepted WITHOUT authentication (demo only: allow_unauthenticated_commands = true)",
            site = scenario.site.site.name
        );
        if !a.no_api {
            cfg.api = Some(coolplane_runtime::http::ApiConfig {
                listen: a.api_listen.clone(),
                tokens: DEMO_TOKENS
                    .iter()
                    .map(|(name, token, role)| coolplane_runtime::http::TokenConfig {
                        name: name.to_string(),
                        token: token.to_string(),
                        role: *role,
                    })
                    .collect(),
                ..Default::default()
            });
        }
        if !a.no_web {
            cfg.web = Some(coolplane_runtime::web::WebConfig {
                listen: a.web_listen.clone(),
            });
        }
        if let Some(url) = &a.history {
            let h = coolplane_runtime::history::HistoryConfig::new(url);
            h.validate().map_err(|e| anyhow::anyhow!("--history: {e}"))?;
            cfg.history = Some(h);
        }
        let daemon = Daemon::new(&cfg, Path::new("."), "demo", clock)?;
        let api = start_api(&daemon, &a.api_listen, &scenario.site.site.name, Some(DEMO_TOKENS[0].1), a.json).await?;
        let web = start_web(&daemon, &a.web_listen, a.json).await?;
        let report = daemon.run(shutdown_after(clock, Some(duration_s)), status_printer()).await;
        stop_api(web).await;
        stop_api(api).await;
        if std::io::stderr().is_terminal() {
            eprintln!();
        }
        let kpis = sim.kpis();
        let plant_s = sim.plant_time_s();
        let published = sim.telemetry_published();
        sim.stop();
        anyhow::Ok((kpis, report, plant_s, published))
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    print_report(&report);
    eprintln!(
        "simulated plant: {:.2} h of plant time, {published} rack telemetry messages published",
        plant_s / 3600.0
    );
    let Some(k) = kpis else {
        bail!("the simulated plant produced no KPIs (it never stepped)")
    };
    let inproc = if a.compare {
        let mut sc = scenario.clone();
        sc.period.duration_s = plant_s;
        let policy = coolplane_policies::by_name(&a.policy)?;
        let r = run(&sc, policy, &RunOptions::default(), &mut |_| {})?;
        Some(r.report.kpis)
    } else {
        None
    };
    if a.json {
        let mut v = serde_json::json!({ "site": scenario.site.site.name, "policy": a.policy, "seed": a.sim.seed, "plant_time_s": plant_s, "over_the_wire": k });
        if let Some(i) = &inproc {
            v["in_process"] = serde_json::to_value(i)?;
        }
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!(
            "KPIs over {:.2} h of plant time (closed loop over Modbus TCP + MQTT){}",
            plant_s / 3600.0,
            if inproc.is_some() {
                ", and the same scenario in process"
            } else {
                ""
            }
        );
        println!("PUE boundary: {}", k.pue_boundary);
        for (i, (name, v, unit)) in kpi_lines(&k).into_iter().enumerate() {
            match &inproc {
                Some(ip) => {
                    let w = kpi_lines(ip)[i].1;
                    println!("  {name:<28} {v:>14.4} {w:>14.4}  {unit}");
                }
                None => println!("  {name:<28} {v:>14.4}  {unit}"),
            }
        }
    }
    if let Some(ip) = &inproc {
        let tol = Tolerance::default();
        let verdict = tol.compare(&k, ip);
        for line in &verdict.lines {
            eprintln!("{line}");
        }
        if !verdict.ok {
            bail!("over-the-wire KPIs differ from the in-process run by more than the stated tolerance");
        }
    }
    Ok(())
}

/// How closely a closed loop over the wire must reproduce the in-process run of the same scenario.
///
/// The plant is the same code with the same seed; what differs is the path of information:
/// readings are sampled by device polls (every `tick/2`), rack telemetry every 10 s, the controller
/// ticks on wall-clock timers instead of in lock-step with the plant, and setpoints arrive one
/// poll later. Those delays shift when (not whether) setpoints move, so energies agree closely
/// but not exactly: IT energy depends on the workload (identical) and on die temperature through
/// leakage (≈ 0.7 %/K of static power), PUE and cooling energy on the controller's timing.
#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    /// |ΔPUE|.
    pub pue_abs: f64,
    /// Relative IT energy.
    pub it_rel: f64,
    /// Relative cooling energy.
    pub cooling_rel: f64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Self {
            pue_abs: 0.002,
            it_rel: 0.005,
            cooling_rel: 0.10,
        }
    }
}

/// The comparison's result.
pub struct Verdict {
    /// Within tolerance.
    pub ok: bool,
    /// One line per KPI compared.
    pub lines: Vec<String>,
}

impl Tolerance {
    /// Compare the over-the-wire KPIs `w` with the in-process `p`.
    pub fn compare(&self, w: &Kpis, p: &Kpis) -> Verdict {
        let mut ok = true;
        let mut lines = Vec::new();
        let mut check = |name: &str, d: f64, tol: f64| {
            let pass = d.abs() <= tol;
            ok &= pass;
            lines.push(format!(
                "{name}: difference {d:+.5} (tolerance ±{tol}) {}",
                if pass { "ok" } else { "EXCEEDED" }
            ));
        };
        check("PUE", w.pue - p.pue, self.pue_abs);
        check(
            "IT energy (relative)",
            w.it_energy_kwh / p.it_energy_kwh - 1.0,
            self.it_rel,
        );
        check(
            "cooling energy (relative)",
            w.cooling_energy_kwh / p.cooling_energy_kwh - 1.0,
            self.cooling_rel,
        );
        let both_zero = (w.throttle_gpu_s == 0.0) == (p.throttle_gpu_s == 0.0);
        ok &= both_zero;
        lines.push(format!(
            "throttle: {} vs {} GPU-s {}",
            w.throttle_gpu_s,
            p.throttle_gpu_s,
            if both_zero { "ok" } else { "DIFFER" }
        ));
        Verdict { ok, lines }
    }
}

/// `coolplane sim-plant serve`.
pub fn serve(a: &ServeArgs) -> Result<()> {
    a.sim.validate()?;
    let duration_s = a.duration.as_deref().map(parse_duration_s).transpose()?;
    let scenario = scenario_for(&a.sim, duration_s.map(|d| d / 86_400.0 + 0.01).unwrap_or(365.0))?;
    let mqtt = a.mqtt.as_deref().map(parse_host_port).transpose()?;
    if let Some((h, p)) = &mqtt {
        broker_reachable(h, *p).context("--mqtt")?;
    }
    let cdu_map = match &a.cdu_map {
        Some(path) => {
            let text = crate::read_bounded(path, "register map")?;
            let name = path.display().to_string();
            let map = coolplane_adapters::regmap::RegisterMap::from_toml_str(&name, &text)?;
            if let Some(why) =
                coolplane_adapters::points::check_map(&map, coolplane_adapters::points::Role::Cdu).refusal()
            {
                eprintln!(
                    "coolplane sim: WARNING: --cdu-map {name} {why}: the daemon will refuse it (coolplane map check)"
                );
            }
            Some((name, std::sync::Arc::new(map)))
        }
        None => None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let clock = Clock::new(a.sim.speed);
        let sim = SimWire::start_with_cdu_map(
            a.sim.wire_config(&scenario, mqtt.clone()),
            coolplane_sim_wire::ServerLimits::default(),
            clock,
            cdu_map,
        )
        .await?;
        println!(
            "coolplane simulated plant `{}` serving (unit id 1 on every device; maps under maps/):",
            scenario.site.site.name
        );
        for e in sim.endpoints() {
            println!(
                "  {:<9} {:>4}  {:<24} modbus tcp {}  map {}",
                format!("{:?}", e.role).to_lowercase(),
                e.index,
                e.name,
                e.addr,
                e.map
            );
        }
        if let Some((h, p)) = &mqtt {
            println!(
                "  racks publish on mqtt {h}:{p} topic coolplane/v1/{}/rack/+/telemetry",
                scenario.site.site.name
            );
        }
        let _ = std::io::stdout().flush();
        shutdown_after(clock, duration_s).await;
        let (req, exc) = sim.modbus_counters();
        let ss = sim.server_stats();
        eprintln!(
            "served {req} Modbus requests ({exc} exception answers, {} for another unit id; {} accept errors, {} connections refused, {} closed idle), {} rack telemetry messages published, {} not sent (broker not connected)",
            ss.wrong_unit,
            ss.accept_errors,
            ss.connections_refused,
            ss.idle_closed,
            sim.telemetry_published(),
            sim.telemetry_not_sent()
        );
        if let Some(path) = &a.kpis_out {
            let k = sim
                .kpis()
                .context("the plant has not stepped: no KPIs to write")?;
            std::fs::write(path, serde_json::to_string_pretty(&k)? + "\n")
                .with_context(|| format!("--kpis-out {}", path.display()))?;
            eprintln!("plant KPIs written to {}", path.display());
        }
        sim.stop();
        anyhow::Ok(())
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// `coolplane run --config FILE`: the production daemon.
pub fn daemon(a: &RunArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.config).with_context(|| format!("reading {}", a.config.display()))?;
    let file = a.config.display().to_string();
    let cfg = DaemonConfig::from_toml_str(&file, &text)?;
    let duration_s = a.duration.as_deref().map(parse_duration_s).transpose()?;
    let base = a
        .config
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = rt.block_on(async {
        let clock = Clock::new(cfg.daemon.speed);
        let d = Daemon::new(&cfg, &base, &file, clock)?;
        eprintln!(
            "coolplane daemon: site {}, policy {}, tick {} s, {} devices",
            cfg.daemon.site,
            cfg.daemon.policy,
            cfg.daemon.tick_s,
            cfg.devices.len()
        );
        if let Some(m) = &cfg.mqtt {
            // A broker that is down at start-up is an outage the daemon rides out (racks stale,
            // Safe mode), but it is said at once, not found out from the report.
            if let Err(e) = broker_reachable(&m.host, m.port) {
                tracing::error!(error = %e, "MQTT broker unreachable at start-up; retrying with back-off");
                eprintln!("coolplane daemon: {e:#}; retrying with back-off (racks stale until it answers)");
            }
        }
        let listen = cfg.api.as_ref().map(|x| x.listen.clone()).unwrap_or_default();
        let api = start_api(&d, &listen, &cfg.daemon.site, None, false).await?;
        let web_listen = cfg.web.as_ref().map(|x| x.listen.clone()).unwrap_or_default();
        let web = start_web(&d, &web_listen, false).await?;
        let report = d.run(shutdown_after(clock, duration_s), status_printer()).await;
        stop_api(web).await;
        stop_api(api).await;
        anyhow::Ok(report)
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    print_report(&report);
    if let (Some(m), Some(st)) = (&cfg.mqtt, &report.mqtt) {
        if st.connects == 0 {
            bail!(
                "the MQTT broker {}:{} was never reached during the run: no rack telemetry (last error: {})",
                m.host,
                m.port,
                st.last_rejection.as_deref().unwrap_or("none")
            );
        }
    }
    Ok(())
}
