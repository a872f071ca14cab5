//! The writer against an in-process HTTP stand-in for `/api/v2/write` that refuses requests
//! for a while: batching, memory bound, spill to disk, resend after a restart, drop accounting.

use super::*;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Clone, Default)]
struct StandIn {
    down: Arc<AtomicBool>,
    received: Arc<Mutex<Vec<String>>>,
    requests: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

async fn write(State(s): State<StandIn>, body: String) -> StatusCode {
    s.requests.fetch_add(1, Ordering::SeqCst);
    if s.down.load(Ordering::SeqCst) {
        s.refused.fetch_add(1, Ordering::SeqCst);
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let mut r = s.received.lock().unwrap();
    r.extend(body.lines().filter(|l| !l.is_empty()).map(str::to_string));
    StatusCode::NO_CONTENT
}

async fn stand_in() -> (String, StandIn) {
    let s = StandIn::default();
    let app = Router::new().route("/api/v2/write", post(write)).with_state(s.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (format!("http://{addr}"), s)
}

fn tick_lines(tick: usize, n: usize) -> Vec<String> {
    (0..n)
        .map(|j| {
            format!(
                "coolplane_test,rack=r{j} v={tick} {}",
                1_700_000_000_000i64 + tick as i64
            )
        })
        .collect()
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("coolplane-history-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn cfg(url: &str, spill: Option<PathBuf>) -> HistoryConfig {
    HistoryConfig {
        batch: 50,
        buffer_points: 200,
        spill_dir: spill,
        spill_max_points: 100_000,
        flush_ms: 20,
        timeout_ms: 2_000,
        retry_max_ms: 100,
        ..HistoryConfig::new(url)
    }
}

async fn wait_for(s: &StandIn, n: usize) {
    for _ in 0..500 {
        if s.received.lock().unwrap().len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("stand-in received {} of {n} lines", s.received.lock().unwrap().len());
}

fn spill_files(d: &Path) -> usize {
    std::fs::read_dir(d)
        .map(|r| {
            r.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".lp"))
            })
            .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_spills_to_disk_and_a_restart_resends_everything_once_in_order() {
    let (url, s) = stand_in().await;
    let dir = temp_dir("outage");
    let mut sent = Vec::new();
    let h = History::start(&cfg(&url, Some(dir.clone()))).unwrap();
    for t in 0..20 {
        let l = tick_lines(t, 10);
        sent.extend(l.clone());
        h.submit(l);
    }
    wait_for(&s, 200).await;
    assert!(
        s.requests.load(Ordering::SeqCst) >= 4,
        "200 lines in batches of at most 50 need at least 4 requests"
    );

    // The database goes away: 1,000 more lines, the memory holds 200, the rest spills.
    s.down.store(true, Ordering::SeqCst);
    for t in 20..120 {
        let l = tick_lines(t, 10);
        sent.extend(l.clone());
        h.submit(l);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let st = h.stats();
    assert!(s.refused.load(Ordering::SeqCst) >= 2, "the writer kept retrying");
    assert!(!st.healthy && st.write_errors >= 2, "{st:?}");
    assert!(st.points_buffered <= 200, "memory bound held: {st:?}");
    assert!(st.points_spilled >= 800, "{st:?}");
    assert_eq!(st.points_dropped, 0);
    assert!(spill_files(&dir) >= 16);

    // Stop during the outage: everything pending goes to disk.
    let st = h.close().await;
    assert_eq!(st.points_buffered, 0);
    assert_eq!(st.points_spilled, 1000, "{st:?}");
    assert_eq!(st.points_dropped, 0);
    assert_eq!(s.received.lock().unwrap().len(), 200);

    // A new writer on the same directory, the database back: the spilled lines go first.
    s.down.store(false, Ordering::SeqCst);
    let h = History::start(&cfg(&url, Some(dir.clone()))).unwrap();
    assert_eq!(h.stats().points_replayed, 1000);
    for t in 120..130 {
        let l = tick_lines(t, 10);
        sent.extend(l.clone());
        h.submit(l);
    }
    wait_for(&s, sent.len()).await;
    let st = h.close().await;
    assert_eq!(st.points_dropped, 0);
    assert_eq!(st.points_spilled, 0);
    let got = s.received.lock().unwrap().clone();
    assert_eq!(got.len(), sent.len(), "nothing lost, nothing twice");
    assert_eq!(got, sent, "delivered in the order produced");
    assert_eq!(spill_files(&dir), 0, "delivered spill files are removed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_spill_dir_overflow_is_dropped_and_counted() {
    let (url, s) = stand_in().await;
    s.down.store(true, Ordering::SeqCst);
    let h = History::start(&cfg(&url, None)).unwrap();
    for t in 0..50 {
        h.submit(tick_lines(t, 10));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let st = h.stats();
    assert_eq!(st.points_buffered + st.points_dropped, 500, "{st:?}");
    assert_eq!(st.points_dropped, 300, "memory holds 200 of 500");
    // The oldest were dropped: what arrives later is the newest 200.
    s.down.store(false, Ordering::SeqCst);
    wait_for(&s, 200).await;
    let st = h.close().await;
    assert_eq!(st.points_written, 200);
    let got = s.received.lock().unwrap().clone();
    assert_eq!(got.first().unwrap(), &tick_lines(30, 10)[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spill_directory_drops_the_oldest_file_and_counts_it() {
    let (url, s) = stand_in().await;
    s.down.store(true, Ordering::SeqCst);
    let dir = temp_dir("full");
    let c = HistoryConfig {
        spill_max_points: 300,
        ..cfg(&url, Some(dir.clone()))
    };
    let h = History::start(&c).unwrap();
    for t in 0..100 {
        h.submit(tick_lines(t, 10));
    }
    let st = h.close().await;
    // 1,000 lines: 200 in memory spill at close, disk holds at most 300: 700 dropped.
    assert_eq!(st.points_spilled, 300, "{st:?}");
    assert_eq!(st.points_dropped, 700, "{st:?}");
    s.down.store(false, Ordering::SeqCst);
    let h = History::start(&c).unwrap();
    wait_for(&s, 300).await;
    h.close().await;
    let got = s.received.lock().unwrap().clone();
    assert_eq!(got.len(), 300);
    assert_eq!(got[0], tick_lines(70, 10)[0], "the newest 300 survive");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_errors_name_the_field() {
    let mut c = HistoryConfig::new("localhost:8428");
    assert!(c.validate().unwrap_err().contains("history.url"));
    c.url = "http://127.0.0.1:8428".into();
    c.validate().unwrap();
    c.buffer_points = 10;
    assert!(c.validate().unwrap_err().contains("history.buffer_points"));
    c.buffer_points = 200_000;
    c.flush_ms = 0;
    assert!(c.validate().unwrap_err().contains("history.flush_ms"));
}

#[test]
fn snapshot_lines_are_line_protocol_with_only_known_values() {
    let mut s = Snapshot {
        unix_ms: 1_700_000_000_123,
        mode: "Safe".into(),
        ..Default::default()
    };
    s.site.name = "hall 10k".into();
    s.site.pue = Some(1.08);
    s.site.it_kw = None;
    s.racks.push(crate::snapshot::RackState {
        name: "r1".into(),
        cdu: "c1".into(),
        ..Default::default()
    });
    let l = lines(&s);
    // The site point (the space in the tag value escaped), the rack's `fresh` flag; the GPU
    // summary with nothing known is left out.
    assert_eq!(l.len(), 2, "{l:?}");
    assert!(l[0].starts_with("coolplane_site,site=hall\\ 10k "), "{}", l[0]);
    assert!(l[0].contains("pue=1.08") && !l[0].contains("it_kw") && l[0].contains("mode_code=2"));
    assert!(l[0].ends_with(" 1700000000123"));
    assert_eq!(
        l[1],
        "coolplane_rack,cdu=c1,rack=r1,site=hall\\ 10k fresh=0 1700000000123"
    );
}
