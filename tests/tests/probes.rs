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
