//! `coolplane bench --wire`: latency of the control path over loopback Modbus TCP, and MQTT
//! rack-telemetry ingest at campus-100k scale.

use anyhow::{bail, Context, Result};
use coolplane_adapters::clock::Clock;
use coolplane_adapters::mqtt::{MqttConfig, MqttLink};
use coolplane_adapters::regmap::RegisterMap;
use coolplane_adapters::telemetry::{encode_rack_telemetry, parse_rack_telemetry, RackTelemetry, TempReport, Topics};
use coolplane_controller::{Controller, ControllerConfig};
use coolplane_core::site::builtin_site;
use coolplane_core::topology::Topology;
use coolplane_scenario::spec::ScenarioSpec;
use coolplane_sim_wire::{Role, SimWire, SimWireConfig};
use rumqttc::{AsyncClient, MqttOptions, QoS};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_modbus::client::{tcp, Reader, Writer};
use tokio_modbus::Slave;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

fn line(name: &str, v: &mut [f64]) {
    let p50 = pct(v, 0.50);
    let p99 = pct(v, 0.99);
    println!(
        "  {name:<58} p50 {:>8.1} µs   p99 {:>8.1} µs   (n = {})",
        p50 * 1e6,
        p99 * 1e6,
        v.len()
    );
}

pub fn run(samples: usize) -> Result<()> {
    println!(
        "coolplane {} bench --wire (release build, loopback, 2-core machine)",
        env!("CARGO_PKG_VERSION")
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(latency(samples))?;
    rt.block_on(ingest())?;
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

async fn latency(samples: usize) -> Result<()> {
    let mut spec = ScenarioSpec::default_for_site("hall-10k");
    spec.scenario.warmup_h = 0.0;
    spec.weather.start_day = Some(180.0);
    spec.weather.days = Some(1.0);
    let scenario = spec.resolve(Path::new("."))?;
    let clock = Clock::new(1.0);
    let sim = SimWire::start(
        SimWireConfig {
            scenario,
            step_s: 1.0,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            modbus_base_port: 0,
            mqtt: None,
            telemetry_interval_s: 10.0,
            limits_on_arrival: false,
        },
        clock,
    )
    .await?;
    // Let the plant take its first steps (1 s each, in real time).
    for _ in 0..50 {
        if sim.last_measurements().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cdu = sim
        .endpoints()
        .iter()
        .find(|e| e.role == Role::Cdu)
        .context("no CDU")?
        .addr;
    let map = Arc::new(RegisterMap::from_toml_str(
        "coolplane-cdu.toml",
        coolplane_sim_wire::CDU_MAP,
    )?);
    let plan = map.read_plan(4);
    let site = builtin_site("hall-10k")?;
    let mut ctl = Controller::new(
        &site,
        coolplane_policies::by_name("trim-respond")?,
        ControllerConfig::default(),
    );
    let image = sim.last_measurements().context("the plant has not stepped")?;
    let sp = map.point("supply_setpoint_c").context("map")?.clone();
    let mut ctx = tcp::connect_slave(cdu, Slave(1)).await?;
    let (mut read, mut tick, mut write, mut total) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..samples {
        let t0 = Instant::now();
        // 1. Sensor: one poll of the CDU's whole map (every block of the read plan).
        let mut words = Vec::new();
        for b in &plan {
            let w = match b.table {
                coolplane_adapters::regmap::Table::Input => ctx.read_input_registers(b.start, b.count).await,
                _ => ctx.read_holding_registers(b.start, b.count).await,
            };
            match w {
                Ok(Ok(w)) => words.push(w),
                other => bail!("read failed: {other:?}"),
            }
        }
        let decoded: usize = plan.iter().zip(&words).map(|(b, w)| map.decode_block(b, w).len()).sum();
        let t1 = Instant::now();
        // 2. Decision: one controller tick on a full hall-10k process image.
        let mut img = image.clone();
        img.t_s = i as f64 * 10.0;
        img.gpus.t_s = img.t_s;
        for c in &mut img.cdus {
            c.supply_temp_c.t_s = img.t_s;
            c.flow_lpm.t_s = img.t_s;
        }
        for r in &mut img.racks {
            r.gpu_temp_max_c.t_s = img.t_s;
        }
        let actions = ctl.tick(img.t_s, &img);
        std::hint::black_box((&actions, &decoded));
        let t2 = Instant::now();
        // 3. Actuator: write the setpoint and read it back.
        let v = 40.0 + (i % 2) as f64 * 0.5;
        let w = coolplane_adapters::regmap::encode(&sp, v)?;
        ctx.write_single_register(sp.address, w[0])
            .await?
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let back = ctx
            .read_holding_registers(sp.address, 1)
            .await?
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        if back != w {
            bail!("read-back mismatch");
        }
        let t3 = Instant::now();
        read.push((t1 - t0).as_secs_f64());
        tick.push((t2 - t1).as_secs_f64());
        write.push((t3 - t2).as_secs_f64());
        total.push((t3 - t0).as_secs_f64());
    }
    println!("sensor-to-setpoint over loopback Modbus TCP (hall-10k, simulated plant stepping in real time):");
    line(
        "poll one CDU (3 requests: input 0+13, input 100+10, holding 0+5)",
        &mut read,
    );
    line(
        "controller tick on the full process image (12 CDUs, 144 racks)",
        &mut tick,
    );
    line("write the supply setpoint and read it back (2 requests)", &mut write);
    line("sensor → setpoint, one path end to end", &mut total);
    println!("  (in operation add up to one poll period and one controller tick of waiting: 5 s and 10 s by default)");
    sim.stop();
    Ok(())
}

async fn ingest() -> Result<()> {
    let site = builtin_site("campus-100k")?;
    let topo = Topology::new(&site);
    let racks: Vec<String> = topo.racks.iter().map(|r| r.name.clone()).collect();
    let gpus: Vec<usize> = topo.racks.iter().map(|r| r.gpus.len()).collect();
    let n_gpu = gpus[0];
    // Payloads: realistic 72-GPU messages, half with absolute temperatures, half with margins.
    let payloads: Vec<Vec<u8>> = racks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let t = RackTelemetry {
                // Stamped now: the link rejects messages older than its stated age limit.
                ts_unix_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as i64)
                    .unwrap_or(0),
                rack: r.clone(),
                seq: 1,
                it_power_kw: 118.0,
                inlet_temp_c: 40.3,
                outlet_temp_c: 49.9,
                gpu_power_w: (0..n_gpu).map(|g| 900.0 + g as f32).collect(),
                gpu_util: vec![0.93; n_gpu],
                gpu_power_limit_w: vec![1000.0; n_gpu],
                gpu_temp_c: (0..n_gpu).map(|g| 70.0 + (g % 9) as f32).collect(),
                gpu_clock_events: vec![0; n_gpu],
                temps_were_margins: false,
            };
            encode_rack_telemetry(
                &t,
                if i % 2 == 1 {
                    TempReport::Margin
                } else {
                    TempReport::Absolute
                },
                89.0,
            )
        })
        .collect();
    // Decode only, one core.
    let t0 = Instant::now();
    let rounds = 20;
    for _ in 0..rounds {
        for p in &payloads {
            std::hint::black_box(parse_rack_telemetry(p, n_gpu, 89.0).map_err(|e| anyhow::anyhow!("{e}"))?);
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let msgs = (rounds * payloads.len()) as f64;
    println!(
        "MQTT rack telemetry, campus-100k ({} racks × {n_gpu} GPUs, {} bytes per message):",
        racks.len(),
        payloads[0].len()
    );
    println!(
        "  decode only (one core):                       {:>9.0} messages/s = {:>6.2} M GPU readings/s",
        msgs / secs,
        msgs * n_gpu as f64 / secs / 1e6
    );
    // Through the embedded broker into the adapter's link.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    crate::wire::start_embedded_broker(port)?;
    let clock = Clock::new(1.0);
    let mut cfg = MqttConfig::new(
        "127.0.0.1",
        port,
        "bench-ingest",
        &site.site.name,
        racks.clone(),
        gpus.clone(),
        89.0,
    );
    cfg.queue_capacity = racks.len() * 8;
    let link = MqttLink::start(cfg, clock);
    let mut opts = MqttOptions::new("bench-publisher", "127.0.0.1", port);
    opts.set_max_packet_size(4 << 20, 4 << 20);
    let (client, mut el) = AsyncClient::new(opts, 4096);
    tokio::spawn(async move { while el.poll().await.is_ok() {} });
    for _ in 0..200 {
        if link.stats().connected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let topics = Topics::new(&site.site.name);
    let rounds = 10usize;
    let total = rounds * racks.len();
    let t0 = Instant::now();
    for _ in 0..rounds {
        for (r, p) in racks.iter().zip(&payloads) {
            client
                .publish(topics.rack_telemetry(r), QoS::AtMostOnce, false, p.clone())
                .await?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = link.stats();
        let done = s.accepted + s.dropped_queue_full + s.rejected.values().sum::<u64>();
        if done >= total as u64 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let s = link.stats();
    println!(
        "  through the embedded broker into the adapter:  {:>9.0} messages/s = {:>6.2} M GPU readings/s ({} of {} accepted, {} dropped oldest, {} rejected; publisher, broker and adapter share the 2 cores)",
        s.accepted as f64 / secs,
        s.accepted as f64 * n_gpu as f64 / secs / 1e6,
        s.accepted,
        total,
        s.dropped_queue_full,
        s.rejected.values().sum::<u64>()
    );
    println!(
        "  needed at campus-100k with 10 s telemetry: {:.0} messages/s = {:.3} M GPU readings/s",
        racks.len() as f64 / 10.0,
        (racks.len() * n_gpu) as f64 / 10.0 / 1e6
    );
    Ok(())
}
