//! The command line as a user runs it: `scenario run` with `--json` and `--out`, `compare`,
//! `site check`, and clear errors for bad input.

use std::process::Command;

fn coolplane(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_coolplane"))
        .args(args)
        .output()
        .expect("run coolplane")
}

// Short scenarios keep the debug-built binary quick: 2 h warm-up, 300 s steps.
const SHORT: &[&str] = &[
    "--weather",
    "synthetic",
    "--period",
    "typical-week",
    "--step",
    "300",
    "--warmup-h",
    "2",
    "--quiet",
];

#[test]
fn json_prints_exactly_one_object() {
    let mut args = vec!["scenario", "run", "--policy", "vendor-default", "--seed", "3", "--json"];
    args.extend_from_slice(SHORT);
    let out = coolplane(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("stdout is one JSON document");
    assert_eq!(v["site"], "hall-10k");
    assert_eq!(v["policy"], "vendor-default");
    assert_eq!(v["seed"], 3);
    assert!(v["pue"].as_f64().unwrap() > 1.0);
    assert!(v["pue_boundary"].as_str().unwrap().contains("utility meter"));
    assert_eq!(stdout.trim().lines().count(), 1);
}

#[test]
fn out_writes_kpis_series_and_real_plots() {
    let dir = std::env::temp_dir().join(format!("coolplane-cli-out-{}", std::process::id()));
    let mut args = vec!["scenario", "run", "--out", dir.to_str().unwrap()];
    args.extend_from_slice(SHORT);
    let out = coolplane(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("PUE boundary") && table.contains("trim-respond") && table.contains("self-checks"));
    let kpis: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("kpis.json")).unwrap()).unwrap();
    assert_eq!(kpis["policy"], "trim-respond");
    let csv = std::fs::read_to_string(dir.join("series.csv")).unwrap();
    let rows = csv.lines().count();
    // 2 h warm-up + 168 h at 300 s per step = 2,040 steps, one row each, plus the header.
    assert_eq!(rows, 2_041, "rows");
    for png in [
        "power_stack.png",
        "pue.png",
        "hottest_gpu.png",
        "temperatures_flows.png",
    ] {
        let bytes = std::fs::read(dir.join(png)).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{png} is a PNG");
        assert!(bytes.len() > 20_000, "{png} has content ({} bytes)", bytes.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_priced_policy_runs_and_is_named_with_its_price() {
    let mut args = vec!["scenario", "run", "--policy", "coordinated:write-kwh=25", "--json"];
    args.extend_from_slice(SHORT);
    let out = coolplane(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
    assert_eq!(v["policy"], "coordinated:write-kwh=25");
    assert_eq!(v["throttle_gpu_s"], 0.0);
}

#[test]
fn compare_prints_both_policies_with_ratios() {
    let mut args = vec!["scenario", "compare", "--policies", "vendor-default,trim-respond"];
    args.extend_from_slice(SHORT);
    let out = coolplane(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(
        s.contains("vendor-default") && s.contains("trim-respond") && s.contains("tr/vd"),
        "{s}"
    );
}

#[test]
fn bad_input_gets_a_clear_error_and_exit_code() {
    let out = coolplane(&["scenario", "run", "--policy", "pid", "--quiet"]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("unknown policy `pid`") && e.contains("trim-respond"), "{e}");

    // A policy's parameters: a value out of range, or one given to a policy that takes none.
    let out = coolplane(&["scenario", "run", "--policy", "coordinated:write-kwh=-1", "--quiet"]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("coordinated:write-kwh=-1") && e.contains("write-kwh = -1"),
        "{e}"
    );
    let out = coolplane(&["scenario", "run", "--policy", "trim-respond:write-kwh=6", "--quiet"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("takes no parameters"));
    let out = coolplane(&[
        "scenario",
        "matrix",
        "--weather",
        "synthetic",
        "--warmup-h=-1",
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("scenario.warmup_h") && e.contains("-1"), "{e}");

    let out = coolplane(&["scenario", "run", "--period", "summer", "--quiet"]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("weather.period") && e.contains("summer"), "{e}");

    let out = coolplane(&["scenario", "run", "--weather", "/nonexistent.epw", "--quiet"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.epw"));

    let dir = std::env::temp_dir().join(format!("coolplane-cli-site-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let site = dir.join("bad-site.toml");
    let text = coolplane_core::site::builtin_site_toml("hall-10k")
        .unwrap()
        .replace("slowdown_c = 89.0", "slowdown_c = 95.0");
    std::fs::write(&site, text).unwrap();
    let out = coolplane(&["site", "check", site.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("gpu.slowdown_c") && e.contains("95"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);

    let out = coolplane(&["site", "check", "hall-10k"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("10368 GPUs"));

    // A device that never ends is refused after a bounded read, not read until memory runs out.
    if std::path::Path::new("/dev/zero").exists() {
        let out = coolplane(&["site", "check", "/dev/zero"]);
        assert_eq!(out.status.code(), Some(2));
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains("/dev/zero") && e.contains("larger than"), "{e}");
    }
    let out = coolplane(&["site", "check", "supernode-2pic"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("10240 GPUs"));
}

#[test]
fn daemon_config_errors_name_the_field() {
    let dir = std::env::temp_dir().join(format!("coolplane-cli-daemon-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("d.toml");
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/daemon.toml")).unwrap();
    for (bad, expect) in [
        (base.replace("tick_s = 10.0", "tick_s = 0.0"), "daemon.tick_s"),
        (
            base.replace("address = \"127.0.0.1:15021\"", "address = \"cdu-2\""),
            "device[1].address",
        ),
        (
            base.replace("policy = \"trim-respond\"", "policy = \"magic\""),
            "daemon.policy",
        ),
        (
            base.replace("policy = \"trim-respond\"", "policy = \"coordinated:write-kwh=2000\""),
            "write-kwh = 2000",
        ),
        (
            base.replace("timeout_ms = 1000", "timeout_ms = 0"),
            "device[0].timeout_ms",
        ),
        (base.replace("poll_s = 5.0", "pol_s = 5.0"), "pol_s"),
        (
            base.replace("url = \"http://127.0.0.1:8428\"", "url = \"127.0.0.1:8428\""),
            "history.url",
        ),
        (base.replace("batch = 5000", "batch = 0"), "history.batch"),
        // Commands over a link without credentials: refused unless the configuration says so.
        (
            base.replace("accept_commands = false", "accept_commands = true"),
            "mqtt.allow_unauthenticated_commands = true",
        ),
        (
            base.replace("listen = \"127.0.0.1:8081\"", "listen = \"loopback\""),
            "web.listen",
        ),
    ] {
        std::fs::write(&cfg, bad).unwrap();
        let out = coolplane(&["run", "--config", cfg.to_str().unwrap(), "--duration", "1s"]);
        assert_eq!(out.status.code(), Some(2));
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(expect), "expected `{expect}` in: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn demo_closes_the_loop_over_the_wire_and_matches_the_in_process_run() {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    // Devices on ports the system chooses (consecutive ports below a free one may be taken by
    // another test's connections); the broker on a free one.
    let (modbus, mqtt) = (0, free());
    let out = coolplane(&[
        "demo",
        "--duration",
        "20m",
        "--speed",
        "300",
        "--modbus-port",
        &modbus.to_string(),
        "--mqtt-port",
        &mqtt.to_string(),
        "--api-listen",
        "127.0.0.1:0",
        "--web-listen",
        "127.0.0.1:0",
        "--compare",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
    let w = &v["over_the_wire"];
    let p = &v["in_process"];
    assert!(w["pue"].as_f64().unwrap() > 1.0);
    assert!(
        (w["pue"].as_f64().unwrap() - p["pue"].as_f64().unwrap()).abs() <= 0.002,
        "{v}"
    );
    assert_eq!(w["throttle_gpu_s"], 0.0);
    assert!(
        stderr.contains("rack messages accepted") && stderr.contains("0 rejected"),
        "{stderr}"
    );
    // The budget API was served (its address on stderr, stdout being the JSON object).
    assert!(stderr.contains("coolplane budget API: http://127.0.0.1:"), "{stderr}");
    // So was the live page, and the daemon's log said what it did.
    assert!(stderr.contains("coolplane live page: http://127.0.0.1:"), "{stderr}");
    assert!(stderr.contains("MQTT broker connected"), "{stderr}");
}

#[test]
fn two_phase_immersion_site_runs_over_the_wire() {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let run = |policy: &str, compare: bool| {
        let (modbus, mqtt) = (0, free());
        let (modbus, mqtt) = (modbus.to_string(), mqtt.to_string());
        let mut args = vec![
            "demo",
            "--site",
            "supernode-2pic",
            "--policy",
            policy,
            "--duration",
            "20m",
            "--speed",
            "300",
            "--modbus-port",
            &modbus,
            "--mqtt-port",
            &mqtt,
            "--web-listen",
            "127.0.0.1:0",
            "--json",
        ];
        if compare {
            args.push("--compare");
        }
        let out = coolplane(&args);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        let v: serde_json::Value = serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
        (v, stderr)
    };
    // Design setpoints: the loop over the wire gives the in-process KPIs.
    let (v, stderr) = run("vendor-default", true);
    let (w, p) = (&v["over_the_wire"], &v["in_process"]);
    assert_eq!(v["site"], "supernode-2pic");
    assert!(
        (w["pue"].as_f64().unwrap() - p["pue"].as_f64().unwrap()).abs() <= 0.002,
        "{v}"
    );
    assert!(w["fluid_loss_kg"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(w["throttle_gpu_s"], 0.0);
    assert!(stderr.contains("0 rejected"), "{stderr}");
    // trim-respond writes the tanks' condenser-water setpoints through the tank register map.
    let (v, _) = run("trim-respond", false);
    let w = &v["over_the_wire"];
    assert!(w["setpoint_writes"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(w["rejected_writes"], 0, "{v}");
    assert_eq!(w["throttle_gpu_s"], 0.0);
    assert!(w["tank_pressure_max_gauge_kpa"].as_f64().unwrap() < 8.0, "{v}");
}

#[test]
fn twin_eval_json_has_every_key_and_bad_input_is_named() {
    let out = coolplane(&[
        "twin",
        "eval",
        "--site",
        "supernode-640",
        "--step",
        "300",
        "--train-days",
        "2",
        "--test-days",
        "2",
        "--fouling-days",
        "0",
        "--json",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.trim().lines().count(), 1);
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    for k in [
        "cv_rmse_pct",
        "nmbe_pct",
        "pue_mae",
        "pue_mae_over_true_it",
        "pue_mae_by_part",
        "hottest_gpu_mae_k",
        "forecast_skill_15min",
        "forecast_skill_1h",
        "forecast_skill_1h_known_busy",
        "runtime_error",
        "fault_precision",
        "fault_recall",
        "fouling_detect_days",
        "whatif_horizons_per_s",
    ] {
        assert!(v.get(k).is_some(), "key {k} missing: {stdout}");
    }
    assert!(v["cv_rmse_pct"].as_f64().unwrap().is_finite());
    assert!(v["whatif_horizons_per_s"].as_f64().unwrap() > 0.0);

    let bad = coolplane(&["twin", "eval", "--train-days", "1", "--quiet"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--train-days"));
    let bad = coolplane(&["twin", "eval", "--runtime-error", "5", "--quiet"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--runtime-error"));
}
