//! History against a real VictoriaMetrics (Debian's `victoria-metrics`): the daemon's state
//! points for a whole site go out through the InfluxDB v2 write API while the database is
//! stopped for a minute and started again; the writer is itself restarted during the outage
//! (what it held is spilled to disk and resent by the next one). Read back with
//! `/api/v1/export`, every series has exactly the time stamps written: none lost, none twice.
//!
//! Needs the `victoria-metrics` binary. Skips with a note when it is not installed, unless
//! `COOLPLANE_REQUIRE_VICTORIAMETRICS` is set (CI sets it), in which case it fails. The outage
//! lasts `COOLPLANE_VM_OUTAGE_S` seconds (default 60).

use coolplane_core::signals::{Measurements, Reading};
use coolplane_core::site::builtin_site;
use coolplane_core::topology::Topology;
use coolplane_runtime::history::{lines, History, HistoryConfig};
use coolplane_runtime::snapshot::Snapshot;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn vm_binary() -> Option<String> {
    for p in ["/usr/bin/victoria-metrics", "/usr/local/bin/victoria-metrics"] {
        if std::path::Path::new(p).exists() {
            return Some(p.to_string());
        }
    }
    if std::env::var_os("COOLPLANE_REQUIRE_VICTORIAMETRICS").is_some() {
        panic!("COOLPLANE_REQUIRE_VICTORIAMETRICS is set but no victoria-metrics binary is installed");
    }
    eprintln!(
        "note: victoria-metrics not installed (apt-get install victoria-metrics); skipping the history outage test"
    );
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(s, "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split(' ').nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default();
    Some((code, body))
}

fn start_vm(bin: &str, port: u16, data: &std::path::Path) -> Child {
    let mut child = Command::new(bin)
        .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
        .arg(format!("-storageDataPath={}", data.display()))
        .arg("-retentionPeriod=1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start victoria-metrics");
    for _ in 0..200 {
        if matches!(http(port, "GET", "/health"), Some((200, _))) {
            return child;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("victoria-metrics did not answer /health on 127.0.0.1:{port}");
}

fn stop_vm(mut c: Child) {
    // SIGTERM (a clean stop, as an operator's restart would do).
    let _ = Command::new("kill").arg(c.id().to_string()).status();
    for _ in 0..200 {
        if c.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// A process image of the whole site with every reading fresh, varying with `k`.
fn image(topo: &Topology, k: usize, t: f64) -> Measurements {
    let v = |base: f64| Reading::good(base + (k % 97) as f64 * 0.01, t);
    let mut m = Measurements {
        t_s: t,
        cdus: vec![Default::default(); topo.cdus.len()],
        facilities: vec![Default::default(); topo.halls.len()],
        racks: vec![Default::default(); topo.racks.len()],
        ..Default::default()
    };
    for c in &mut m.cdus {
        c.supply_temp_c = v(32.0);
        c.return_temp_c = v(42.0);
        c.flow_lpm = v(600.0);
        c.heat_kw = v(400.0);
        c.pump_power_kw = v(4.0);
        c.supply_setpoint_c = v(32.0);
    }
    for f in &mut m.facilities {
        f.supply_temp_c = v(28.0);
        f.return_temp_c = v(38.0);
        f.flow_lpm = v(9000.0);
        f.fan_power_kw = v(30.0);
        f.pump_power_kw = v(12.0);
        f.chiller_power_kw = v(0.0);
    }
    for r in &mut m.racks {
        r.it_power_kw = v(80.0);
        r.inlet_temp_c = v(32.0);
        r.outlet_temp_c = v(44.0);
        r.gpu_temp_max_c = v(75.0);
    }
    m.gpus.t_s = t;
    m.gpus.temp_c = (0..topo.gpu_count).map(|g| 60.0 + (g % 13) as f32).collect();
    m.gpus.power_w = vec![700.0; topo.gpu_count];
    m.meter.facility_power_kw = v(12_000.0);
    m.meter.it_power_kw = v(11_000.0);
    m.meter.power_budget_kw = v(14_000.0);
    m
}

/// Series key as VictoriaMetrics names it: `{measurement}_{field}` plus the tags.
fn expected_series(lines: &[String], out: &mut BTreeMap<String, Vec<i64>>) {
    for l in lines {
        let (head, rest) = l.split_once(' ').unwrap();
        let (fields, ts) = rest.rsplit_once(' ').unwrap();
        let ts: i64 = ts.parse().unwrap();
        let mut parts = head.split(',');
        let meas = parts.next().unwrap();
        let tags: BTreeSet<String> = parts.map(str::to_string).collect();
        for f in fields.split(',') {
            let name = f.split_once('=').unwrap().0;
            let key = format!(
                "{meas}_{name}{{{}}}",
                tags.iter().cloned().collect::<Vec<_>>().join(",")
            );
            out.entry(key).or_default().push(ts);
        }
    }
}

#[test]
fn history_survives_a_database_outage_and_a_writer_restart_with_nothing_lost_or_twice() {
    let Some(bin) = vm_binary() else { return };
    let outage_s: f64 = std::env::var("COOLPLANE_VM_OUTAGE_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60.0);
    let root = std::env::temp_dir().join(format!("coolplane-vm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let data = root.join("vm");
    let spill = root.join("spill");
    let port = free_port();
    let mut vm = Some(start_vm(&bin, port, &data));

    let site = builtin_site("hall-10k").unwrap();
    let topo = Topology::new(&site);
    let cfg = HistoryConfig {
        batch: 2_000,
        buffer_points: 10_000,
        spill_dir: Some(spill.clone()),
        flush_ms: 200,
        timeout_ms: 5_000,
        retry_max_ms: 2_000,
        ..HistoryConfig::new(&format!("http://127.0.0.1:{port}"))
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let mut writer = Some(History::start(&cfg).unwrap());
    let mut expected = BTreeMap::new();
    let mut written = 0usize;
    let tick = Duration::from_millis(250);
    let up_before = 8.0;
    let up_after = 8.0;
    let total = up_before + outage_s + up_after;
    let t0 = Instant::now();
    let (mut stopped, mut restarted_writer, mut started_again) = (false, false, false);
    let mut k = 0usize;
    let mut max_spilled = 0u64;
    let mut first_ms = i64::MAX;
    while t0.elapsed().as_secs_f64() < total {
        let el = t0.elapsed().as_secs_f64();
        if !stopped && el >= up_before {
            stop_vm(vm.take().unwrap());
            stopped = true;
            eprintln!("victoria-metrics stopped at {el:.1} s for {outage_s} s");
        }
        if stopped && !restarted_writer && el >= up_before + outage_s / 2.0 {
            // The daemon restarts during the outage: the writer spills what it holds.
            let st = rt.block_on(writer.take().unwrap().close());
            assert_eq!(st.points_dropped, 0, "{st:?}");
            assert!(st.points_spilled > 0, "points kept on disk at stop: {st:?}");
            max_spilled = max_spilled.max(st.points_spilled);
            let w = History::start(&cfg).unwrap();
            assert_eq!(
                w.stats().points_replayed,
                st.points_spilled,
                "the new writer finds them"
            );
            writer = Some(w);
            restarted_writer = true;
            eprintln!(
                "writer restarted at {el:.1} s with {} points spilled",
                st.points_spilled
            );
        }
        if stopped && !started_again && el >= up_before + outage_s {
            vm = Some(start_vm(&bin, port, &data));
            started_again = true;
            eprintln!("victoria-metrics started again at {el:.1} s");
        }
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        first_ms = first_ms.min(unix_ms);
        let snap = Snapshot::from_image(
            "hall-10k",
            &topo,
            &image(&topo, k, k as f64),
            k as f64,
            60.0,
            "Auto",
            87.0,
            unix_ms,
        );
        let l = lines(&snap);
        written += l.len();
        expected_series(&l, &mut expected);
        writer.as_ref().unwrap().submit(l);
        let st = writer.as_ref().unwrap().stats();
        max_spilled = max_spilled.max(st.points_spilled);
        k += 1;
        std::thread::sleep(tick.saturating_sub(Duration::from_millis(0)));
    }
    assert!(stopped && restarted_writer && started_again);
    // Wait until the backlog is delivered, then stop the writer.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let st = writer.as_ref().unwrap().stats();
        if st.points_buffered == 0 && st.points_spilled == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "backlog not delivered: {st:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let st = rt.block_on(writer.take().unwrap().close());
    eprintln!("writer: {st:?}; most points spilled at once: {max_spilled}");
    assert_eq!(st.points_dropped, 0);
    assert_eq!(st.points_spilled, 0);
    assert!(
        max_spilled > cfg.buffer_points as u64 / 2,
        "the outage exercised the disk spill"
    );
    assert!(st.write_errors > 0, "the writer saw the outage");

    // Read back.
    assert!(matches!(http(port, "GET", "/internal/force_flush"), Some((200, _))));
    std::thread::sleep(Duration::from_secs(2));
    let q = format!(
        "/api/v1/export?match[]=%7B__name__%3D~%22coolplane_.*%22%7D&start={}&end={}",
        first_ms / 1000 - 60,
        first_ms / 1000 + 3600
    );
    let (code, body) = http(port, "GET", &q).expect("export");
    assert_eq!(code, 200, "{body}");
    let mut got: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let m = v["metric"].as_object().unwrap();
        let name = m["__name__"].as_str().unwrap();
        let tags: BTreeSet<String> = m
            .iter()
            .filter(|(k, _)| *k != "__name__" && *k != "db")
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
            .collect();
        let key = format!("{name}{{{}}}", tags.into_iter().collect::<Vec<_>>().join(","));
        let ts: Vec<i64> = v["timestamps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_i64().unwrap())
            .collect();
        got.entry(key).or_default().extend(ts);
    }
    stop_vm(vm.take().unwrap());
    let _ = std::fs::remove_dir_all(&root);

    let n_exp: usize = expected.values().map(Vec::len).sum();
    let n_got: usize = got.values().map(Vec::len).sum();
    eprintln!(
        "{} ticks, {written} lines, {} series, {n_exp} samples written, {n_got} read back",
        k,
        expected.len()
    );
    let missing: Vec<_> = expected.keys().filter(|k| !got.contains_key(*k)).take(5).collect();
    assert!(missing.is_empty(), "series missing: {missing:?}");
    let extra: Vec<_> = got.keys().filter(|k| !expected.contains_key(*k)).take(5).collect();
    assert!(extra.is_empty(), "series nobody wrote: {extra:?}");
    for (key, mut want) in expected {
        let mut have = got.remove(&key).unwrap();
        want.sort_unstable();
        have.sort_unstable();
        let dups = have.windows(2).filter(|w| w[0] == w[1]).count();
        assert_eq!(dups, 0, "{key}: {dups} samples twice");
        assert_eq!(
            have.len(),
            want.len(),
            "{key}: {} read back of {} written",
            have.len(),
            want.len()
        );
        assert_eq!(have, want, "{key}: time stamps differ");
    }
    assert_eq!(n_got, n_exp);
}
