//! Reliability probes at the command line: unsafe settings and flags are refused with an error
//! that names them, an unreachable broker is an error, and SIGTERM stops the daemon and the demo
//! cleanly with their final report.
//!
//! Ports: the daemon's devices and the demo use fixed loopback ports 24900–24999 (nothing
//! listens on the device ports; the daemon must see them as bad, not reach anyone's devices).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn coolplane(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_coolplane"))
        .args(args)
        .output()
        .expect("run coolplane")
}

fn example_config() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/daemon.toml"))
        .unwrap()
        .replace("127.0.0.1:15020", "127.0.0.1:24991")
        .replace("127.0.0.1:15021", "127.0.0.1:24992")
        .replace("127.0.0.1:15032", "127.0.0.1:24993")
        .replace("127.0.0.1:15033", "127.0.0.1:24994")
        .replace("listen = \"127.0.0.1:8080\"", "listen = \"127.0.0.1:0\"")
        .replace("listen = \"127.0.0.1:8081\"", "listen = \"127.0.0.1:0\"")
        .replace("port = 1883", "port = 24983")
        .replace(
            "map = \"../maps/coolplane-cdu.toml\"",
            "map = \"builtin:coolplane-cdu\"",
        )
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("coolplane-probes-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Probe 4: controller settings that would switch a safety function off are refused, naming the
/// field and its range.
#[test]
fn unsafe_controller_settings_are_refused_naming_the_field() {
    let dir = temp_dir("ctl");
    let cfg = dir.join("d.toml");
    let base = example_config();
    for (from, to, expect) in [
        (
            "stale_after_s = 180.0",
            "stale_after_s = inf",
            "controller.stale_after_s = inf",
        ),
        (
            "stale_after_s = 180.0",
            "stale_after_s = nan",
            "controller.stale_after_s = NaN",
        ),
        (
            "stale_after_s = 180.0",
            "stale_after_s = -5.0",
            "controller.stale_after_s = -5",
        ),
        (
            "guard_margin_k = 4.0",
            "guard_margin_k = -50.0",
            "controller.guard_margin_k = -50",
        ),
        (
            "guard_margin_k = 4.0",
            "guard_margin_k = 4.0\nsupply_rate_k_per_min = inf",
            "controller.supply_rate_k_per_min = inf",
        ),
        (
            "guard_margin_k = 4.0",
            "guard_margin_k = 4.0\ndeadband_k = -1.0",
            "controller.deadband_k = -1",
        ),
        ("port = 24983", "port = 0", "mqtt.port = 0"),
        ("host = \"127.0.0.1\"", "host = \"\"", "mqtt.host is empty"),
    ] {
        assert!(base.contains(from));
        std::fs::write(&cfg, base.replacen(from, to, 1)).unwrap();
        let out = coolplane(&["run", "--config", cfg.to_str().unwrap(), "--duration", "1s"]);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{to}: {e}");
        assert!(
            e.contains(expect) && (e.contains("must be within") || e.contains("empty")),
            "expected `{expect}` in: {e}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Probe 4: demo and serve flags out of range are errors naming the flag and its range; nothing
/// hangs, nothing runs on a tick of zero, no device gets a port past 65535.
#[test]
fn bad_demo_flags_are_errors_naming_the_flag() {
    for (args, expect) in [
        (vec!["demo", "--speed", "0"], "--speed 0: must be within"),
        (vec!["demo", "--speed", "nan"], "--speed NaN: must be within"),
        (vec!["demo", "--tick", "0"], "--tick 0: must be within"),
        (vec!["demo", "--step=-1"], "--step -1: must be within"),
        (
            vec!["sim-plant", "serve", "--speed", "inf"],
            "--speed inf: must be within",
        ),
    ] {
        let t0 = Instant::now();
        let out = coolplane(&args);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(expect), "{args:?}: expected `{expect}` in: {e}");
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{args:?} took {:?}",
            t0.elapsed()
        );
    }
    // Consecutive device ports past 65535 are refused, not wrapped to random ports.
    let out = coolplane(&[
        "demo",
        "--modbus-port",
        "65525",
        "--mqtt-port",
        "24981",
        "--no-api",
        "--duration",
        "60s",
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains("modbus base port 65525") && e.contains("past 65535"), "{e}");
}

/// Probe 6: a broker that is not there, an empty host or port 0 is an error naming the flag.
#[test]
fn an_unreachable_broker_is_an_error_naming_the_flag() {
    for (args, expect) in [
        (
            vec!["demo", "--broker", "127.0.0.1:1"],
            "--broker: MQTT broker 127.0.0.1:1 is unreachable",
        ),
        (vec!["demo", "--broker", ":1883"], "the host is empty"),
        (vec!["demo", "--broker", "127.0.0.1:0"], "port 0"),
        (
            vec!["sim-plant", "serve", "--mqtt", "127.0.0.1:1"],
            "--mqtt: MQTT broker 127.0.0.1:1 is unreachable",
        ),
    ] {
        let out = coolplane(&args);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(expect), "{args:?}: expected `{expect}` in: {e}");
    }
}

/// Probe 6: a daemon whose broker never answers says so at start and ends with an error.
#[test]
fn a_daemon_whose_broker_is_unreachable_says_so_and_fails() {
    let dir = temp_dir("broker");
    let cfg = dir.join("d.toml");
    std::fs::write(
        &cfg,
        example_config()
            .replace("port = 24983", "port = 1")
            .replace("speed = 1.0", "speed = 60.0")
            .replace("tick_s = 10.0", "tick_s = 5.0"),
    )
    .unwrap();
    let out = coolplane(&["run", "--config", cfg.to_str().unwrap(), "--duration", "2m"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{e}");
    assert!(e.contains("MQTT broker 127.0.0.1:1 is unreachable"), "{e}");
    assert!(e.contains("was never reached during the run"), "{e}");
    // The final report is still printed.
    assert!(e.contains("adapters:") && e.contains("ticks"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Start `args`, wait for `ready` on stderr, send SIGTERM; returns (exit status, stderr).
fn sigterm_after(args: &[&str], ready: &str) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_coolplane"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut text = Vec::new();
    let end = Instant::now() + Duration::from_secs(120);
    while Instant::now() < end && !String::from_utf8_lossy(&text).contains(ready) {
        if let Ok(b) = rx.recv_timeout(Duration::from_millis(100)) {
            text.extend(b);
        }
    }
    assert!(
        String::from_utf8_lossy(&text).contains(ready),
        "{}",
        String::from_utf8_lossy(&text)
    );
    std::thread::sleep(Duration::from_secs(2));
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < end + Duration::from_secs(30),
            "still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    while let Ok(b) = rx.recv_timeout(Duration::from_millis(500)) {
        text.extend(b);
    }
    (status, String::from_utf8_lossy(&text).into_owned())
}

/// Probe 8: SIGTERM stops the daemon and the demo cleanly, with the final report, as Ctrl-C does.
#[test]
fn sigterm_stops_the_daemon_and_the_demo_with_their_final_report() {
    let dir = temp_dir("term");
    let cfg = dir.join("d.toml");
    std::fs::write(&cfg, example_config().replace("speed = 1.0", "speed = 60.0")).unwrap();
    let (st, e) = sigterm_after(&["run", "--config", cfg.to_str().unwrap()], "coolplane daemon: site");
    assert!(e.contains("SIGTERM received"), "{e}");
    assert!(e.contains("adapters:") && e.contains("ticks"), "the final report: {e}");
    assert!(st.code().is_some(), "ended by the signal instead of stopping: {st:?}");
    let _ = std::fs::remove_dir_all(&dir);

    let (st, e) = sigterm_after(
        &[
            "demo",
            "--modbus-port",
            "24100",
            "--mqtt-port",
            "24982",
            "--no-api",
            "--web-listen",
            "127.0.0.1:0",
            "--speed",
            "60",
            "--duration",
            "1d",
        ],
        "coolplane demo:",
    );
    assert!(e.contains("SIGTERM received"), "{e}");
    assert!(
        e.contains("adapters:") && e.contains("simulated plant:"),
        "the final report: {e}"
    );
    assert_eq!(st.code(), Some(0), "{e}");
}
