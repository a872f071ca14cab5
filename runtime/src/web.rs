//! The live operator page, served by the daemon on loopback: one HTML page embedded in the
//! binary (vanilla JavaScript, inline SVG and CSS: no build step, nothing fetched from outside),
//! its state as JSON, updates as server-sent events, and the daemon's Prometheus metrics.
//!
//! Routes: `/` the page; `/api/state` the latest view (site, halls, CDUs, hottest racks, mode,
//! plan, recent events); `/api/events` server-sent events (`state` with the view, at most four a
//! second, and `event` with each event-log line); `/metrics` the daemon's metrics in the
//! Prometheus text format. Read-only: nothing here changes the plant.

use crate::metrics::{DaemonMetrics, Note};
use crate::snapshot::{CduState, HallState, RackState, SiteState, Snapshot};
use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures_util::stream::Stream;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// The page, embedded.
pub const INDEX_HTML: &str = include_str!("web/index.html");

/// Event-log lines kept for a page that connects later.
const LOG_KEEP: usize = 200;
/// Racks shown (the hottest first).
const HOT_RACKS: usize = 8;
/// Least time between two `state` events, ms.
const MIN_STATE_INTERVAL_MS: u64 = 250;

/// `[web]` table of the daemon configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// Listen address (loopback by default: the page has no authentication).
    #[serde(default = "default_listen")]
    pub listen: String,
}

fn default_listen() -> String {
    "127.0.0.1:8081".into()
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
        }
    }
}

impl WebConfig {
    /// Check the fields; the message names the offending one.
    pub fn validate(&self) -> Result<(), String> {
        self.listen
            .parse::<std::net::SocketAddr>()
            .map(|_| ())
            .map_err(|e| format!("web.listen = {:?}: {e}", self.listen))
    }
}

/// What the page shows.
#[derive(Debug, Clone, Serialize, Default)]
pub struct View {
    /// Plant time, s.
    pub t_s: f64,
    /// Wall-clock time of the tick, ms since the Unix epoch.
    pub unix_ms: i64,
    /// Controller mode.
    pub mode: String,
    /// Site.
    pub site: SiteState,
    /// Halls.
    pub halls: Vec<HallState>,
    /// CDUs.
    pub cdus: Vec<CduState>,
    /// The hottest racks.
    pub hot_racks: Vec<RackState>,
    /// The current energy plan (`null` until a plan source exists).
    pub plan: Option<serde_json::Value>,
    /// Ticks seen.
    pub ticks: u64,
}

#[derive(Default)]
struct Inner {
    view: Option<View>,
    log: VecDeque<Note>,
    plan: Option<serde_json::Value>,
    last_sent: Option<Instant>,
    ticks: u64,
}

/// Shared state of the web service (cheap to clone).
#[derive(Clone)]
pub struct WebHub {
    inner: Arc<Mutex<Inner>>,
    tx: broadcast::Sender<(&'static str, String)>,
    metrics: DaemonMetrics,
}

impl WebHub {
    /// A hub serving `metrics` at `/metrics`.
    pub fn new(metrics: DaemonMetrics) -> Self {
        let (tx, _) = broadcast::channel(1024);
        Self {
            inner: Arc::new(Mutex::new(Inner::default())),
            tx,
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Set the current plan (shown as is; `None`: "no plan yet").
    pub fn set_plan(&self, plan: Option<serde_json::Value>) {
        self.lock().plan = plan;
    }

    /// One tick: the snapshot and what the tick said.
    pub fn publish(&self, snap: &Snapshot, notes: &[Note]) {
        let mut hot: Vec<RackState> = snap
            .racks
            .iter()
            .filter(|r| r.gpu_temp_max_c.is_some())
            .cloned()
            .collect();
        hot.sort_by(|a, b| {
            b.gpu_temp_max_c
                .partial_cmp(&a.gpu_temp_max_c)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        hot.truncate(HOT_RACKS);
        let mut i = self.lock();
        i.ticks += 1;
        let view = View {
            t_s: snap.t_s,
            unix_ms: snap.unix_ms,
            mode: snap.mode.clone(),
            site: snap.site.clone(),
            halls: snap.halls.clone(),
            cdus: snap.cdus.clone(),
            hot_racks: hot,
            plan: i.plan.clone(),
            ticks: i.ticks,
        };
        for n in notes {
            if i.log.len() >= LOG_KEEP {
                i.log.pop_front();
            }
            i.log.push_back(n.clone());
            if let Ok(j) = serde_json::to_string(n) {
                let _ = self.tx.send(("event", j));
            }
        }
        let due = i
            .last_sent
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(MIN_STATE_INTERVAL_MS));
        if due {
            if let Ok(j) = serde_json::to_string(&view) {
                let _ = self.tx.send(("state", j));
                i.last_sent = Some(Instant::now());
            }
        }
        i.view = Some(view);
    }

    fn state_json(&self) -> serde_json::Value {
        let i = self.lock();
        serde_json::json!({
            "view": i.view,
            "events": i.log.iter().collect::<Vec<_>>(),
        })
    }
}

/// The router.
pub fn app(hub: WebHub) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/api/state", get(state))
        .route("/api/events", get(events))
        .route("/metrics", get(metrics))
        .with_state(hub)
}

async fn index() -> impl IntoResponse {
    (
        [
            (header::CACHE_CONTROL, "no-store"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'",
            ),
        ],
        Html(INDEX_HTML),
    )
}

async fn state(State(hub): State<WebHub>) -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(hub.state_json()))
}

async fn metrics(State(hub): State<WebHub>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        hub.metrics.render(),
    )
        .into_response()
}

async fn events(State(hub): State<WebHub>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = hub.tx.subscribe();
    let first = hub
        .state_json()
        .get("view")
        .filter(|v| !v.is_null())
        .map(|v| Event::default().event("state").data(v.to_string()));
    let stream = futures_util::stream::unfold((first, rx), |(mut first, mut rx)| async move {
        if let Some(e) = first.take() {
            return Some((Ok(e), (None, rx)));
        }
        loop {
            match rx.recv().await {
                Ok((kind, data)) => return Some((Ok(Event::default().event(kind).data(data)), (None, rx))),
                // A slow page missed some: the next state is complete anyway.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// Serve the page on `listener` until `shutdown` resolves (open event streams are cut after
/// one second).
pub async fn serve(
    listener: tokio::net::TcpListener,
    hub: WebHub,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let (tx, mut rx) = tokio::sync::watch::channel(false);
    let server = axum::serve(listener, app(hub)).with_graceful_shutdown(async move {
        let _ = rx.changed().await;
    });
    let server = std::future::IntoFuture::into_future(server);
    tokio::pin!(server);
    tokio::pin!(shutdown);
    tokio::select! {
        r = &mut server => return r,
        _ = &mut shutdown => { let _ = tx.send(true); }
    }
    tokio::select! {
        r = &mut server => r,
        _ = tokio::time::sleep(Duration::from_secs(1)) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_page_state_and_events_are_served() {
        let hub = WebHub::new(DaemonMetrics::default());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let h2 = hub.clone();
        tokio::spawn(async move { serve(l, h2, std::future::pending()).await });
        let get = |path: &'static str| async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let page = get("/").await;
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        assert!(page.contains("EventSource") && page.contains("<svg"));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "nothing fetched from outside"
        );
        let st = get("/api/state").await;
        assert!(st.contains("\"view\":null"), "{st}");
        let mut snap = Snapshot {
            t_s: 3600.0,
            mode: "Auto".into(),
            ..Default::default()
        };
        snap.site.pue = Some(1.0712);
        snap.cdus.push(CduState {
            name: "hall-a-cdu-00".into(),
            fresh: true,
            ..Default::default()
        });
        // An event stream open before the tick gets the state and the event.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        hub.publish(
            &snap,
            &[Note {
                t_s: 3600.0,
                severity: "critical",
                text: "guard".into(),
            }],
        );
        let mut buf = vec![0u8; 65536];
        let mut got = String::new();
        for _ in 0..50 {
            let n = tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await;
            if let Ok(Ok(n)) = n {
                got.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            if got.contains("event: state") && got.contains("event: event") {
                break;
            }
        }
        assert!(got.contains("text/event-stream"), "{got}");
        assert!(
            got.contains("event: event\ndata: {\"t_s\":3600.0,\"severity\":\"critical\",\"text\":\"guard\"}"),
            "{got}"
        );
        assert!(got.contains("event: state") && got.contains("\"pue\":1.0712"), "{got}");
        let st = get("/api/state").await;
        assert!(
            st.contains("\"plan\":null") && st.contains("hall-a-cdu-00") && st.contains("guard"),
            "{st}"
        );
        let m = get("/metrics").await;
        assert!(
            m.contains("text/plain; version=0.0.4") && m.contains("coolplane_ticks_total"),
            "{m}"
        );
    }
}
