//! The secured MQTT setup against a real Mosquitto: a TLS-only listener with a CA made for the
//! test by the `openssl` command, a password file made by `mosquitto_passwd`, and the shipped
//! `examples/mosquitto/mosquitto.conf` and `examples/mosquitto/coolplane.acl` (file paths and the
//! port rewritten, nothing else). The daemon is built from a configuration file as
//! `coolplane run` builds it (`username`, `password_file`, `ca_file`: rustls). Shown, each beside a
//! positive control that would make the check fail if the protection were missing:
//!
//! - anonymous clients, a wrong password, an unknown user, plain TCP on the TLS port and a client
//!   that trusts another CA are refused; every identity of the password file connects over TLS;
//! - commands from a viewer or a rack agent never reach the daemon (nothing applied, no result),
//!   while the same commands from the operator are applied and answered; the viewer reads state
//!   and results, and what it publishes reaches nobody;
//! - a rack agent's telemetry on another rack's topic never reaches the daemon, while its own does
//!   and the same bytes from the right agent are accepted; its power-limit command to another rack
//!   never reaches that rack;
//! - a daemon configuration that would take commands over an unauthenticated link is refused
//!   unless it says `allow_unauthenticated_commands = true` (no broker needed).
//!
//! Needs `mosquitto`, `mosquitto_passwd` and `openssl`: skipped with a note when one is missing,
//! a failure when `COOLPLANE_REQUIRE_MOSQUITTO` is set (CI sets it).

use coolplane_adapters::clock::Clock;
use coolplane_adapters::mqtt::MqttLink;
use coolplane_adapters::mqtt_auth::{tls_client_config, MqttAuth};
use coolplane_adapters::telemetry::{encode_rack_telemetry, RackTelemetry, TempReport};
use coolplane_controller::Mode;
use coolplane_core::site::builtin_site;
use coolplane_core::topology::Topology;
use coolplane_runtime::{Daemon, DaemonConfig, DaemonReport};
use rumqttc::{AsyncClient, ConnectReturnCode, ConnectionError, Event, MqttOptions, Packet, QoS};
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SITE: &str = "hall-10k";
const DAEMON: &str = "coolplane-daemon";
const OPERATOR: &str = "operator";
const VIEWER: &str = "viewer";

/// How long any one expected event may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(20);

fn root() -> String {
    format!("coolplane/v1/{SITE}")
}

/// Password of an identity in the test's password file.
fn password(user: &str) -> String {
    format!("pw-{user}-x7Qk2")
}

/// The first two racks of the site: the identities (and ACL `%u`) of two rack agents.
fn racks() -> (String, String, usize) {
    let topo = Topology::new(&builtin_site(SITE).unwrap());
    (
        topo.racks[0].name.clone(),
        topo.racks[1].name.clone(),
        topo.racks[0].gpus.len(),
    )
}

// ---------------------------------------------------------------------------------------------
// Tools and the broker
// ---------------------------------------------------------------------------------------------

struct Tools {
    mosquitto: PathBuf,
    passwd: PathBuf,
    openssl: PathBuf,
}

fn find(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in [
        "/usr/sbin",
        "/usr/bin",
        "/usr/local/sbin",
        "/usr/local/bin",
        "/sbin",
        "/bin",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// The three tools, or `None` (with a note) when one is missing; a failure when
/// `COOLPLANE_REQUIRE_MOSQUITTO` asks for them.
fn tools(test: &str) -> Option<Tools> {
    let names = ["mosquitto", "mosquitto_passwd", "openssl"];
    let found: Vec<Option<PathBuf>> = names.iter().map(|n| find(n)).collect();
    let missing: Vec<&str> = names
        .iter()
        .zip(&found)
        .filter(|(_, f)| f.is_none())
        .map(|(n, _)| *n)
        .collect();
    if missing.is_empty() {
        let mut f = found.into_iter().flatten();
        return Some(Tools {
            mosquitto: f.next().unwrap(),
            passwd: f.next().unwrap(),
            openssl: f.next().unwrap(),
        });
    }
    let required = std::env::var("COOLPLANE_REQUIRE_MOSQUITTO").is_ok_and(|v| !v.is_empty() && v != "0");
    assert!(
        !required,
        "COOLPLANE_REQUIRE_MOSQUITTO is set but {} is not installed (apt-get install mosquitto mosquitto-clients openssl)",
        missing.join(", ")
    );
    eprintln!("note: {} not installed; skipping {test}", missing.join(", "));
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private Mosquitto on a TLS-only loopback listener, killed (and its files removed) on drop.
struct Broker {
    child: Child,
    dir: PathBuf,
    port: u16,
    /// TLS trusting the test's CA (no credentials).
    tls: MqttAuth,
    /// TLS trusting another CA, which did not sign the broker's certificate.
    other_tls: MqttAuth,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A self-signed CA `{name}.crt` / `{name}.key` in `dir` (P-256, v3, CA:TRUE).
fn make_ca(t: &Tools, dir: &Path, name: &str) {
    let cnf = dir.join(format!("{name}.cnf"));
    std::fs::write(
        &cnf,
        format!(
            "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = v3_ca\n[dn]\nCN = coolplane test {name}\n\
             [v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\nsubjectKeyIdentifier = hash\n"
        ),
    )
    .unwrap();
    run(
        Command::new(&t.openssl)
            .current_dir(dir)
            .args(["req", "-x509", "-config"])
            .arg(&cnf)
            .args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
            .args([
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
            ]),
        "openssl req -x509 (CA)",
    );
}

impl Broker {
    fn start(t: &Tools, tag: &str) -> Broker {
        let dir = std::env::temp_dir().join(format!("coolplane-acl-tls-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // The CA, another CA, and the broker's certificate for 127.0.0.1 and localhost.
        make_ca(t, &dir, "ca");
        make_ca(t, &dir, "other-ca");
        std::fs::write(
            dir.join("server.cnf"),
            "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = localhost\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("server.ext"),
            "basicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature\nextendedKeyUsage = serverAuth\n\
             subjectAltName = DNS:localhost,IP:127.0.0.1\nsubjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n",
        )
        .unwrap();
        run(
            Command::new(&t.openssl)
                .current_dir(&dir)
                .args(["req", "-new", "-config", "server.cnf"])
                .args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
                .args(["-keyout", "server.key", "-out", "server.csr"]),
            "openssl req (server key and request)",
        );
        run(
            Command::new(&t.openssl).current_dir(&dir).args([
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ]),
            "openssl x509 -req (server certificate)",
        );
        // The password file: the daemon, an operator, a viewer and two rack agents.
        let (rack_a, rack_b, _) = racks();
        let passwd = dir.join("coolplane.passwd");
        for (i, user) in [DAEMON, OPERATOR, VIEWER, &rack_a, &rack_b].iter().enumerate() {
            let mut c = Command::new(&t.passwd);
            if i == 0 {
                c.arg("-c");
            }
            run(
                c.arg("-b").arg(&passwd).arg(user).arg(password(user)),
                "mosquitto_passwd -b",
            );
        }
        // The shipped ACL, byte for byte, and the shipped configuration with its file paths and
        // listener rewritten.
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/mosquitto");
        std::fs::copy(examples.join("coolplane.acl"), dir.join("coolplane.acl")).unwrap();
        let shipped = std::fs::read_to_string(examples.join("mosquitto.conf")).unwrap();
        let port = free_port();
        let conf = rewrite_conf(&shipped, &dir, port);
        std::fs::write(dir.join("mosquitto.conf"), &conf).unwrap();
        let log = std::fs::File::create(dir.join("mosquitto.log")).unwrap();
        let mut child = Command::new(&t.mosquitto)
            .arg("-c")
            .arg(dir.join("mosquitto.conf"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start mosquitto");
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = child.try_wait() {
                panic!(
                    "mosquitto exited ({st}) on\n{conf}\nlog:\n{}",
                    std::fs::read_to_string(dir.join("mosquitto.log")).unwrap_or_default()
                );
            }
            assert!(t0.elapsed() < PATIENCE, "mosquitto did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let tls = |f: &str| MqttAuth {
            credentials: None,
            tls: Some(tls_client_config(&std::fs::read(dir.join(f)).unwrap()).unwrap()),
        };
        Broker {
            child,
            port,
            tls: tls("ca.crt"),
            other_tls: tls("other-ca.crt"),
            dir,
        }
    }

    /// TLS with the test's CA and `user`'s password.
    fn auth(&self, user: &str) -> MqttAuth {
        MqttAuth {
            credentials: Some((user.to_string(), password(user))),
            tls: self.tls.tls.clone(),
        }
    }

    /// A daemon built from a configuration file as `coolplane run` builds it: credentials from a
    /// password file, TLS with `ca_file`.
    fn daemon(&self, tag: &str, ca_file: &str, pw: &str) -> Daemon {
        std::fs::write(self.dir.join(format!("{tag}.password")), format!("{pw}\n")).unwrap();
        let file = self.dir.join(format!("{tag}.toml"));
        let text = format!(
            "[daemon]\nsite = \"{SITE}\"\ntick_s = 1.0\n\n[mqtt]\nhost = \"127.0.0.1\"\nport = {}\nclient_id = \"coolplane-{tag}\"\n\
             username = \"{DAEMON}\"\npassword_file = \"{tag}.password\"\nca_file = \"{ca_file}\"\n",
            self.port
        );
        std::fs::write(&file, &text).unwrap();
        let name = file.display().to_string();
        let cfg = DaemonConfig::from_toml_str(&name, &text).unwrap();
        Daemon::new(&cfg, &self.dir, &name, Clock::new(1.0)).unwrap()
    }
}

/// The shipped `mosquitto.conf` for the test: every file it names replaced by the test's own, its
/// one listener moved to `127.0.0.1:{port}`, and `user root` added (when the test runs as root,
/// Mosquitto would otherwise drop to the `mosquitto` user, who cannot read the test's files;
/// without root it has no effect). Every other line is kept as shipped.
fn rewrite_conf(shipped: &str, dir: &Path, port: u16) -> String {
    let mut out = String::new();
    let mut replaced = std::collections::BTreeMap::new();
    for line in shipped.lines() {
        let mut words = line.split_whitespace();
        let key = words.next().unwrap_or("");
        let file = match key {
            "password_file" => Some("coolplane.passwd"),
            "acl_file" => Some("coolplane.acl"),
            "cafile" => Some("ca.crt"),
            "certfile" => Some("server.crt"),
            "keyfile" => Some("server.key"),
            _ => None,
        };
        let new = if let Some(f) = file {
            format!("{key} {}", dir.join(f).display())
        } else if key == "listener" {
            format!("listener {port} 127.0.0.1")
        } else {
            line.to_string()
        };
        if file.is_some() || key == "listener" {
            *replaced.entry(key.to_string()).or_insert(0) += 1;
        }
        out.push_str(&new);
        out.push('\n');
    }
    for key in ["password_file", "acl_file", "cafile", "certfile", "keyfile", "listener"] {
        assert_eq!(
            replaced.get(key),
            Some(&1),
            "the shipped mosquitto.conf should have exactly one `{key}`:\n{shipped}"
        );
    }
    assert!(
        shipped.lines().any(|l| l.trim() == "allow_anonymous false"),
        "the shipped mosquitto.conf must say allow_anonymous false"
    );
    out.push_str("user root\n");
    out
}

// ---------------------------------------------------------------------------------------------
// Test clients
// ---------------------------------------------------------------------------------------------

/// Messages a test client received: (topic, payload).
type Inbox = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A connected MQTT client whose event loop runs in the background, recording what it receives.
struct Peer {
    client: AsyncClient,
    seen: Inbox,
    acks: Arc<AtomicU64>,
    subacks: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Connect to the broker; `Err(None)`: no answer within [`PATIENCE`].
async fn connect(port: u16, id: &str, auth: &MqttAuth) -> Result<Peer, Option<ConnectionError>> {
    let mut opts = MqttOptions::new(id, "127.0.0.1", port);
    opts.set_keep_alive(Duration::from_secs(5));
    // Discovery messages are larger than rumqttc's default limit (10 KiB).
    opts.set_max_packet_size(4 << 20, 4 << 20);
    auth.apply(&mut opts);
    let (client, mut el) = AsyncClient::new(opts, 64);
    let connack = tokio::time::timeout(PATIENCE, async {
        loop {
            match el.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(c))) => return Ok(c.code),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
    })
    .await;
    match connack {
        Err(_) => return Err(None),
        Ok(Err(e)) => return Err(Some(e)),
        Ok(Ok(ConnectReturnCode::Success)) => {}
        Ok(Ok(code)) => panic!("CONNACK {code:?} without an error"),
    }
    let seen: Inbox = Arc::new(Mutex::new(Vec::new()));
    let acks = Arc::new(AtomicU64::new(0));
    let subacks = Arc::new(AtomicU64::new(0));
    let task = {
        let (seen, acks, subacks) = (seen.clone(), acks.clone(), subacks.clone());
        tokio::spawn(async move {
            loop {
                match el.poll().await {
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        seen.lock().unwrap().push((p.topic.clone(), p.payload.to_vec()));
                    }
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        acks.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        subacks.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(e) => panic!("test client lost its connection: {e:?}"),
                }
            }
        })
    };
    Ok(Peer {
        client,
        seen,
        acks,
        subacks,
        task,
    })
}

async fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < PATIENCE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Peer {
    async fn subscribe(&self, filter: &str) {
        let n = self.subacks.load(Ordering::SeqCst);
        self.client.subscribe(filter, QoS::AtLeastOnce).await.unwrap();
        wait_until(&format!("SUBACK of {filter}"), || {
            self.subacks.load(Ordering::SeqCst) > n
        })
        .await;
    }

    /// Publish at QoS 1 and wait for the broker's PUBACK: the broker has then handled the
    /// message (delivered it to every subscriber allowed to see it, or dropped it by its ACL),
    /// so anything published after it reaches a subscriber after it.
    async fn publish(&self, topic: &str, payload: impl Into<Vec<u8>>, retain: bool) {
        let n = self.acks.load(Ordering::SeqCst);
        self.client
            .publish(topic, QoS::AtLeastOnce, retain, payload.into())
            .await
            .unwrap();
        wait_until(&format!("PUBACK of {topic}"), || self.acks.load(Ordering::SeqCst) > n).await;
    }

    /// Messages received on topics starting with `prefix`.
    fn seen(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t.starts_with(prefix))
            .cloned()
            .collect()
    }
}

async fn peer(b: &Broker, user: &str) -> Peer {
    // A client id of its own (a second session with the same id would close the first).
    static N: AtomicU64 = AtomicU64::new(0);
    let id = format!("test-{user}-{}", N.fetch_add(1, Ordering::SeqCst));
    // A transport error (a TLS handshake reset while the machine is loaded) is retried, as a
    // client would; a refusal is not (it is what other tests look for) and fails here.
    let mut last = None;
    for _ in 0..3 {
        match connect(b.port, &id, &b.auth(user)).await {
            Ok(p) => return p,
            Err(Some(e @ (ConnectionError::Io(_) | ConnectionError::Tls(_)))) => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("{user} over TLS with its password: {e:?}"),
        }
    }
    panic!("{user} over TLS with its password: {last:?} (3 tries)")
}

fn link(d: &Daemon) -> &MqttLink {
    d.wire().mqtt.as_ref().expect("the daemon has an MQTT link")
}

/// One rack's telemetry, stamped now.
fn telemetry(rack: &str, gpus: usize, seq: u64) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let t = RackTelemetry {
        ts_unix_ms: now,
        rack: rack.to_string(),
        seq,
        it_power_kw: gpus as f64 * 0.6,
        inlet_temp_c: 40.0,
        outlet_temp_c: 50.0,
        gpu_power_w: vec![500.0; gpus],
        gpu_util: vec![0.5; gpus],
        gpu_power_limit_w: vec![1000.0; gpus],
        gpu_temp_c: vec![60.0; gpus],
        gpu_clock_events: vec![0; gpus],
        temps_were_margins: false,
    };
    encode_rack_telemetry(&t, TempReport::Absolute, 90.0)
}

fn refused(e: &Option<ConnectionError>) -> bool {
    matches!(
        e,
        Some(ConnectionError::ConnectionRefused(
            ConnectReturnCode::NotAuthorized | ConnectReturnCode::BadUserNamePassword
        ))
    )
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_password_holders_over_tls_connect() {
    let Some(t) = tools("only_password_holders_over_tls_connect") else {
        return;
    };
    let b = Broker::start(&t, "connect");
    let (rack_a, rack_b, _) = racks();
    // Positive control: every identity of the password file connects over TLS with its password.
    for user in [DAEMON, OPERATOR, VIEWER, &rack_a, &rack_b] {
        peer(&b, user).await;
    }
    // Anonymous, a wrong password, a user not in the file: refused by the broker.
    let e = connect(b.port, "test-anonymous", &b.tls).await.err().flatten();
    assert!(refused(&e), "anonymous: {e:?}");
    let wrong = MqttAuth {
        credentials: Some((VIEWER.into(), "not-the-password".into())),
        tls: b.tls.tls.clone(),
    };
    let e = connect(b.port, "test-wrong", &wrong).await.err().flatten();
    assert!(refused(&e), "wrong password: {e:?}");
    let stranger = MqttAuth {
        credentials: Some(("intruder".into(), password("intruder"))),
        tls: b.tls.tls.clone(),
    };
    let e = connect(b.port, "test-stranger", &stranger).await.err().flatten();
    assert!(refused(&e), "unknown user: {e:?}");
    // Plain TCP to the TLS port, with a valid password: no MQTT session.
    let plain = MqttAuth {
        credentials: Some((VIEWER.into(), password(VIEWER))),
        tls: None,
    };
    assert!(
        connect(b.port, "test-plain", &plain).await.is_err(),
        "plain TCP on the TLS listener"
    );
    // A client that trusts another CA refuses the broker's certificate.
    let other = MqttAuth {
        credentials: Some((VIEWER.into(), password(VIEWER))),
        tls: b.other_tls.tls.clone(),
    };
    let e = connect(b.port, "test-other-ca", &other).await.err().flatten();
    assert!(matches!(e, Some(ConnectionError::Tls(_))), "another CA: {e:?}");

    // The daemon's own link, from its configuration file: the wrong CA and a wrong password
    // never connect; the right ones do.
    let bad_ca = b.daemon("daemon-other-ca", "other-ca.crt", &password(DAEMON));
    let bad_pw = b.daemon("daemon-bad-pw", "ca.crt", "not-the-password");
    let good = b.daemon("daemon-good", "ca.crt", &password(DAEMON));
    wait_until("the daemon's link to connect", || link(&good).stats().connected).await;
    wait_until("the misconfigured links to fail", || {
        link(&bad_ca).stats().connection_errors > 0 && link(&bad_pw).stats().connection_errors > 0
    })
    .await;
    for (what, d) in [("another CA", &bad_ca), ("a wrong password", &bad_pw)] {
        let s = link(d).stats();
        assert!(!s.connected && s.connects == 0, "the daemon's link with {what}: {s:?}");
    }
    let why = link(&bad_pw).stats().last_rejection.unwrap_or_default();
    assert!(why.to_lowercase().contains("refused"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_operators_command_and_viewers_only_read() {
    let Some(t) = tools("only_operators_command_and_viewers_only_read") else {
        return;
    };
    let b = Broker::start(&t, "commands");
    let (rack_a, _, _) = racks();
    let root = root();
    let viewer = peer(&b, VIEWER).await;
    viewer.subscribe(&format!("{root}/#")).await;
    viewer.subscribe("homeassistant/#").await;
    let mut d = b.daemon("daemon", "ca.crt", &password(DAEMON));
    // The daemon's "online" follows its subscriptions on the same connection.
    let status = format!("{root}/status");
    wait_until("the daemon's `online`", || {
        viewer.seen(&status).iter().any(|(_, p)| p == b"online")
    })
    .await;
    let mut rep = DaemonReport::default();
    d.tick(&mut rep);
    // The viewer reads the daemon's state and its Home Assistant discovery.
    let site_state = format!("{root}/site/state");
    wait_until("the site's state at the viewer", || {
        !viewer.seen(&site_state).is_empty()
    })
    .await;
    let first: Value = serde_json::from_slice(&viewer.seen(&site_state)[0].1).unwrap();
    assert_eq!(first["policy"], "trim-respond", "{first}");
    wait_until("discovery at the viewer", || {
        !viewer.seen("homeassistant/device/").is_empty()
    })
    .await;

    let cdu = d.wire().topology.cdus[0].name.clone();
    let l = d.controller().limits().cdus[0];
    let sp = ((l.supply_min_c + l.supply_max_c) / 2.0 * 10.0).round() / 10.0;
    let mode_topic = format!("{root}/controller/mode/set");
    let cdu_topic = format!("{root}/cdu/{cdu}/supply_temp_setpoint_c/set");
    let commands = |who: &str| {
        [
            (
                mode_topic.clone(),
                json!({"request_id": format!("{who}-mode"), "mode": "manual", "ttl_s": 600}),
            ),
            (
                cdu_topic.clone(),
                json!({"request_id": format!("{who}-cdu"), "supply_temp_setpoint_c": sp, "ttl_s": 600}),
            ),
        ]
    };
    // A viewer and a rack agent send commands (each handled by the broker before the next
    // message is sent), and the viewer tries to forge the site's retained state.
    let agent = peer(&b, &rack_a).await;
    for (who, p) in [("viewer", &viewer), ("rack", &agent)] {
        for (topic, payload) in commands(who) {
            p.publish(&topic, payload.to_string(), false).await;
        }
    }
    viewer.publish(&site_state, r#"{"forged":true}"#, true).await;
    // The ACL's rack patterns apply to every user name: the viewer and the operator publish no
    // telemetry under their own names either.
    let (rack_viewer, rack_operator) = (format!("{root}/rack/{VIEWER}/"), format!("{root}/rack/{OPERATOR}/"));
    viewer.publish(&format!("{rack_viewer}telemetry"), "{}", false).await;
    let operator = peer(&b, OPERATOR).await;
    operator
        .publish(&format!("{rack_operator}telemetry"), "{}", false)
        .await;
    // Positive control: the operator sends the same commands, after them.
    for (topic, payload) in commands("operator") {
        operator.publish(&topic, payload.to_string(), false).await;
    }
    let t0 = Instant::now();
    while d.operator().unwrap().stats.accepted < 2 {
        assert!(t0.elapsed() < PATIENCE, "the operator's commands were not applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
        d.tick(&mut rep);
    }
    // Only the operator's two commands reached the daemon: the viewer's and the rack agent's
    // were handled by the broker first and would have arrived before them.
    let s = &d.operator().unwrap().stats;
    assert_eq!((s.accepted, s.rejected, s.retained_ignored), (2, 0, 0), "{s:?}");
    assert_eq!(link(&d).stats().control_received, 2, "{:?}", link(&d).stats());
    let mut leases: Vec<String> = d.operator().unwrap().leases().into_iter().map(|l| l.1).collect();
    leases.sort();
    assert_eq!(leases, ["operator-cdu", "operator-mode"]);
    assert_eq!(d.controller().requested_mode(), Mode::Manual);
    assert_eq!(d.controller().operator_setpoints().cdu_supply_c[0], Some(sp));
    // The viewer reads the operator's results, and there are no others.
    let results = format!("{root}/cmd_result/");
    wait_until("the operator's results at the viewer", || {
        viewer.seen(&results).len() >= 2
    })
    .await;
    let mut got: Vec<(String, Value)> = viewer
        .seen(&results)
        .into_iter()
        .map(|(t, p)| (t, serde_json::from_slice(&p).unwrap()))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got.len(), 2, "{got:?}");
    for ((topic, r), id) in got.iter().zip(["operator-cdu", "operator-mode"]) {
        assert_eq!(topic, &format!("{results}{id}"));
        assert_eq!(r["status"], "accepted", "{r}");
    }
    // What the viewer published reached nobody: not itself (it reads everything under the
    // root), not the daemon, not a fresh subscriber of the retained state (the daemon's).
    assert!(viewer.seen(&rack_viewer).is_empty() && viewer.seen(&rack_operator).is_empty());
    assert_eq!(link(&d).stats().unknown_rack, 0, "{:?}", link(&d).stats());
    assert!(
        viewer
            .seen(&site_state)
            .iter()
            .all(|(_, p)| !p.starts_with(b"{\"forged\"")),
        "the viewer's forged state was delivered"
    );
    let fresh = peer(&b, OPERATOR).await;
    fresh.subscribe(&site_state).await;
    wait_until("the retained site state", || !fresh.seen(&site_state).is_empty()).await;
    let retained: Value = serde_json::from_slice(&fresh.seen(&site_state)[0].1).unwrap();
    assert_eq!(retained["policy"], "trim-respond", "retained site state: {retained}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_agent_publishes_only_for_its_own_rack() {
    let Some(t) = tools("a_rack_agent_publishes_only_for_its_own_rack") else {
        return;
    };
    let b = Broker::start(&t, "racks");
    let (rack_a, rack_b, gpus) = racks();
    let root = root();
    let operator = peer(&b, OPERATOR).await;
    operator.subscribe(&format!("{root}/rack/+/telemetry")).await;
    operator.subscribe(&format!("{root}/status")).await;
    let d = b.daemon("daemon", "ca.crt", &password(DAEMON));
    wait_until("the daemon's `online`", || {
        operator
            .seen(&format!("{root}/status"))
            .iter()
            .any(|(_, p)| p == b"online")
    })
    .await;
    let agent_a = peer(&b, &rack_a).await;
    let agent_b = peer(&b, &rack_b).await;
    let topic_a = format!("{root}/rack/{rack_a}/telemetry");
    let topic_b = format!("{root}/rack/{rack_b}/telemetry");
    // Agent A forges rack B's telemetry (a payload the daemon would accept from B), then sends
    // its own.
    let forged = telemetry(&rack_b, gpus, 7);
    agent_a.publish(&topic_b, forged.clone(), false).await;
    agent_a.publish(&topic_a, telemetry(&rack_a, gpus, 1), false).await;
    let mqtt = link(&d);
    wait_until("rack A's telemetry at the daemon", || mqtt.latest()[0].is_some()).await;
    let latest = mqtt.latest();
    assert_eq!(latest[0].as_ref().unwrap().telemetry.seq, 1);
    assert!(latest[1].is_none(), "the forged telemetry of rack B reached the daemon");
    let s = mqtt.stats();
    assert_eq!((s.accepted, s.unknown_rack), (1, 0), "{s:?}");
    assert!(s.rejected.is_empty(), "{s:?}");
    assert!(operator.seen(&topic_b).is_empty(), "the broker delivered the forgery");
    assert_eq!(operator.seen(&topic_a).len(), 1);
    // Positive control: the same bytes from rack B's own agent are accepted.
    agent_b.publish(&topic_b, forged, false).await;
    wait_until("rack B's telemetry at the daemon", || mqtt.latest()[1].is_some()).await;
    assert_eq!(mqtt.latest()[1].as_ref().unwrap().telemetry.seq, 7);
    assert_eq!(mqtt.stats().accepted, 2);
    // Power limits: agent A's command to rack B never reaches B's agent; the daemon's does.
    let set_b = format!("{root}/rack/{rack_b}/power_limit/set");
    agent_b.subscribe(&set_b).await;
    agent_a
        .publish(
            &set_b,
            json!({"ts": "2030-01-01T00:00:00Z", "request_id": "forged", "limits_w": vec![400.0; gpus]}).to_string(),
            false,
        )
        .await;
    assert!(mqtt.send_power_limits(&rack_b, vec![700.0; gpus], 0));
    wait_until("the daemon's power limits at rack B", || {
        !agent_b.seen(&set_b).is_empty()
    })
    .await;
    let got = agent_b.seen(&set_b);
    assert_eq!(got.len(), 1, "rack B got more than the daemon's command");
    let cmd: Value = serde_json::from_slice(&got[0].1).unwrap();
    assert!(cmd["request_id"].as_str().unwrap().starts_with(&rack_b), "{cmd}");
}

/// No broker needed: the configuration is refused before anything connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_need_an_authenticated_link_unless_the_configuration_says_otherwise() {
    let base = format!(
        "[daemon]\nsite = \"{SITE}\"\n\n[mqtt]\nhost = \"127.0.0.1\"\nport = {}\n",
        free_port()
    );
    let parse = |extra: &str| DaemonConfig::from_toml_str("d.toml", &format!("{base}{extra}"));
    // Commands are accepted by default: without credentials that is refused, naming the way out.
    let e = parse("").unwrap_err().to_string();
    for k in [
        "mqtt.username",
        "accept_commands = false",
        "allow_unauthenticated_commands = true",
    ] {
        assert!(e.contains(k), "`{k}` not in: {e}");
    }
    assert!(parse("accept_commands = true\n").is_err());
    assert!(parse("allow_unauthenticated_commands = false\n").is_err());
    assert!(
        parse("username = \"coolplane-daemon\"\n").is_err(),
        "username without password_file"
    );
    // Positive controls: each way out is accepted.
    assert!(parse("accept_commands = false\n").is_ok());
    assert!(parse("allow_unauthenticated_commands = true\n").is_ok());
    assert!(parse("username = \"coolplane-daemon\"\npassword_file = \"pw\"\n").is_ok());
    // A configuration built in code goes through the same check in `Daemon::new`.
    let mut cfg = parse("allow_unauthenticated_commands = true\n").unwrap();
    cfg.mqtt.as_mut().unwrap().allow_unauthenticated_commands = false;
    let e = Daemon::new(&cfg, Path::new("."), "code", Clock::new(1.0))
        .err()
        .unwrap();
    assert!(e.to_string().contains("allow_unauthenticated_commands"), "{e}");
    // Without commands the daemon does not even subscribe to a command topic.
    cfg.mqtt.as_mut().unwrap().accept_commands = false;
    let d = Daemon::new(&cfg, Path::new("."), "code", Clock::new(1.0)).unwrap();
    let f = d.operator().unwrap().filters();
    assert!(!f.is_empty() && f.iter().all(|f| !f.ends_with("/set")), "{f:?}");
}
