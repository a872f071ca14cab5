//! The power-budget API for job schedulers: HTTP/JSON over the controller's ledger.
//!
//! Resources (base path `/v1`): domains and their limits, limit overrides, feasibility,
//! placements, allocations (leases), the forecast and server-sent events; the Kubernetes
//! scheduler extender (`/k8s/filter`, `/k8s/prioritize`); `/healthz`, `/readyz`, Prometheus
//! `/metrics`; the OpenAPI document at `/openapi.json`, generated from this code (utoipa) and kept
//! in the repository as `api/openapi.json` (a test fails when they differ).
//!
//! The ledger is pure code; this module only translates. The daemon's tick feeds the ledger from
//! the process image ([`ApiState::on_tick`]) and turns its grants into power-limit commands, so
//! that caps actually reach the racks and revert when a lease ends. Requests are answered at
//! the current plant time; expiry and limit enforcement happen at the tick.
//!
//! Security: bearer tokens from the configuration file, each with a role (`viewer` reads,
//! `scheduler` also leases and asks, `operator` also overrides limits). No token, no access,
//! except `/healthz`, `/readyz` and the OpenAPI document (which holds no data). Binds to loopback
//! by default.

pub mod dto;
mod handlers;
mod k8s;
mod problem;
pub mod time;

use coolplane_controller::budget::{merge_limits, BudgetConfig, BudgetFeed, ProcessImageCooling, Unleased};
use coolplane_controller::ledger::{Ledger, LedgerConfig, LedgerEvent};
use coolplane_core::signals::{Actions, Measurements};
use coolplane_core::site::Site;
use coolplane_core::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

pub use handlers::{app, ApiDoc};
pub use problem::ApiError;

/// Role of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Reads domains, allocations, forecast, events, metrics.
    Viewer,
    /// Also asks feasibility and placement, leases power, calls the Kubernetes extender.
    Scheduler,
    /// Also overrides domain limits.
    Operator,
}

/// One `[[api.tokens]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Who holds it (for logs and idempotency keys).
    pub name: String,
    /// The secret (at least 16 characters).
    pub token: String,
    /// Role.
    pub role: Role,
}

/// `[api]` table of the daemon configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Listen address (loopback by default).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Bearer tokens.
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// Grace period after a preemption notice, s.
    #[serde(default = "default_grace")]
    pub grace_s: f64,
    /// Caps of GPUs no lease holds: `floor` (strict) or `observe` (left at TDP, counted as
    /// unmanaged load from their measured draw).
    #[serde(default = "default_unleased")]
    pub unleased: Unleased,
    /// Margin kept free at the site meter, fraction of its limit.
    #[serde(default = "default_margin")]
    pub site_margin_frac: f64,
}

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}
fn default_grace() -> f64 {
    120.0
}
fn default_unleased() -> Unleased {
    Unleased::Observe
}
fn default_margin() -> f64 {
    0.03
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            tokens: Vec::new(),
            grace_s: default_grace(),
            unleased: default_unleased(),
            site_margin_frac: default_margin(),
        }
    }
}

impl ApiConfig {
    /// Check the fields; the message names the offending one.
    pub fn validate(&self) -> Result<(), String> {
        self.listen
            .parse::<std::net::SocketAddr>()
            .map_err(|e| format!("api.listen = {:?}: {e}", self.listen))?;
        if !(self.grace_s.is_finite() && self.grace_s >= 0.0 && self.grace_s <= 86_400.0) {
            return Err(format!("api.grace_s = {}: must be within [0, 86400] s", self.grace_s));
        }
        if !(self.site_margin_frac.is_finite() && (0.0..0.5).contains(&self.site_margin_frac)) {
            return Err(format!(
                "api.site_margin_frac = {}: must be within [0, 0.5)",
                self.site_margin_frac
            ));
        }
        for (i, t) in self.tokens.iter().enumerate() {
            if t.token.len() < 16 {
                return Err(format!("api.tokens[{i}].token: at least 16 characters"));
            }
            if self.tokens[..i].iter().any(|o| o.token == t.token) {
                return Err(format!("api.tokens[{i}].token: the same token twice"));
            }
        }
        Ok(())
    }
}

/// Counters for `/metrics`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Metrics {
    pub requests: HashMap<(String, String, u16), u64>,
    pub allocations_created: u64,
    pub allocations_refused: u64,
    pub idempotent_replays: u64,
    pub feasibility_checks: u64,
    pub auth_failures: u64,
    pub events: HashMap<&'static str, u64>,
    pub ticks: u64,
    pub caps_commands: u64,
}

/// Idempotency records: (token name, key) → request fingerprint and allocation id. Bounded;
/// the oldest are forgotten first.
#[derive(Debug, Default)]
pub(crate) struct Idempotency {
    map: HashMap<(String, String), (String, u64)>,
    order: VecDeque<(String, String)>,
}

const IDEMPOTENCY_MAX: usize = 100_000;

impl Idempotency {
    pub fn get(&self, who: &str, key: &str) -> Option<&(String, u64)> {
        self.map.get(&(who.to_string(), key.to_string()))
    }
    pub fn put(&mut self, who: &str, key: &str, fingerprint: String, id: u64) {
        if self.order.len() >= IDEMPOTENCY_MAX {
            if let Some(k) = self.order.pop_front() {
                self.map.remove(&k);
            }
        }
        let k = (who.to_string(), key.to_string());
        self.order.push_back(k.clone());
        self.map.insert(k, (fingerprint, id));
    }
}

/// Everything behind the lock.
pub struct Budget {
    /// The ledger.
    pub ledger: Ledger,
    feed: BudgetFeed,
    cooling: ProcessImageCooling,
    topo: Topology,
    node_gpu0: Vec<usize>,
    ctl_last: Vec<Vec<f32>>,
    applied_w: Vec<f32>,
    power_w: Vec<f32>,
    fed: bool,
    pub(crate) idem: Idempotency,
    pub(crate) metrics: Metrics,
}

/// Shared state of the API (cheap to clone).
#[derive(Clone)]
pub struct ApiState {
    inner: Arc<Mutex<Budget>>,
    tokens: Arc<Vec<TokenConfig>>,
    clock: Arc<dyn Fn() -> f64 + Send + Sync>,
    epoch_unix_s: f64,
    events: broadcast::Sender<(String, String)>,
    kick: Arc<tokio::sync::Notify>,
    daemon_metrics: Option<crate::metrics::DaemonMetrics>,
}

impl ApiState {
    /// State for a site. `clock` gives plant seconds; `epoch_unix_s` is the UTC time of plant
    /// time zero (the times the API shows).
    pub fn new(
        site: &Site,
        cfg: &ApiConfig,
        clock: Arc<dyn Fn() -> f64 + Send + Sync>,
        epoch_unix_s: f64,
        stale_after_s: f64,
    ) -> Self {
        let topo = Topology::new(site);
        let ledger = Ledger::new(
            site,
            &topo,
            LedgerConfig {
                grace_s: cfg.grace_s,
                ..LedgerConfig::default()
            },
        );
        let feed = BudgetFeed::new(
            site,
            &topo,
            BudgetConfig {
                stale_after_s,
                site_margin_frac: cfg.site_margin_frac,
                unleased: cfg.unleased,
            },
        );
        let mut node_gpu0 = Vec::new();
        for r in &topo.racks {
            let spec = topo.hall_spec(site, r.hall);
            for n in 0..spec.rack.nodes_per_rack as usize {
                node_gpu0.push(r.gpus.start + n * spec.rack.gpus_per_node as usize);
            }
        }
        let (events, _) = broadcast::channel(4096);
        Self {
            inner: Arc::new(Mutex::new(Budget {
                ledger,
                feed,
                cooling: ProcessImageCooling::new(site, &topo),
                ctl_last: topo.racks.iter().map(|_| Vec::new()).collect(),
                applied_w: Vec::new(),
                power_w: Vec::new(),
                node_gpu0,
                topo,
                fed: false,
                idem: Idempotency::default(),
                metrics: Metrics::default(),
            })),
            tokens: Arc::new(cfg.tokens.clone()),
            clock,
            epoch_unix_s,
            events,
            kick: Arc::new(tokio::sync::Notify::new()),
            daemon_metrics: None,
        }
    }

    /// Append the daemon's metrics to this API's `/metrics` (one registry, one naming scheme).
    pub fn with_daemon_metrics(mut self, m: crate::metrics::DaemonMetrics) -> Self {
        self.daemon_metrics = Some(m);
        self
    }

    /// The daemon's metrics in the text format, when attached.
    pub(crate) fn daemon_metrics_text(&self) -> String {
        self.daemon_metrics.as_ref().map(|m| m.render()).unwrap_or_default()
    }

    /// Notified when a limit changed through the API: the daemon then sends the new caps at once
    /// instead of waiting for its next tick (the power-budget fast path).
    pub fn kick(&self) -> Arc<tokio::sync::Notify> {
        self.kick.clone()
    }

    /// Plant time now, s.
    pub fn now_s(&self) -> f64 {
        (self.clock)()
    }

    /// RFC 3339 UTC of a plant time.
    pub fn rfc3339(&self, plant_s: f64) -> String {
        time::format_unix(self.epoch_unix_s + plant_s)
    }

    /// Plant time of an RFC 3339 string.
    pub fn plant_s(&self, rfc3339: &str) -> Result<f64, String> {
        Ok(time::parse_rfc3339(rfc3339)? - self.epoch_unix_s)
    }

    /// Lock the ledger (poisoning is not fatal: the ledger's invariant does not depend on a
    /// handler finishing).
    pub fn lock(&self) -> MutexGuard<'_, Budget> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The daemon's tick: feed the ledger from the image (staleness, contract, cooling, unmanaged
    /// load; expiry, enforcement), publish its events, and merge its caps into the controller's
    /// actions (the lower limit wins). Returns the number of racks that got new caps.
    pub fn on_tick(&self, now_s: f64, image: &Measurements, actions: &mut Actions) -> usize {
        let mut b = self.lock();
        let b = &mut *b;
        let leased = b.feed.leased_gpus(&b.ledger);
        b.feed.feed(&mut b.ledger, image, &b.cooling, &leased, now_s);
        let caps = b.feed.caps(&b.ledger);
        let changed = b.feed.changed_limits(&caps);
        let n = changed.len();
        let ctl = std::mem::take(&mut actions.power_limits);
        actions.power_limits = merge_limits(&ctl, &caps, &b.topo, &mut b.ctl_last, &changed);
        b.applied_w = image.gpus.power_limit_w.clone();
        b.power_w = image.gpus.power_w.clone();
        b.fed = true;
        b.metrics.ticks += 1;
        b.metrics.caps_commands += n as u64;
        for e in b.ledger.drain_events() {
            let (kind, text) = event_json(self, &e);
            *b.metrics.events.entry(kind).or_default() += 1;
            let _ = self.events.send((kind.to_string(), text));
        }
        n
    }
}

fn event_json(st: &ApiState, e: &LedgerEvent) -> (&'static str, String) {
    use serde_json::json;
    let t = |s: f64| st.rfc3339(s);
    let (kind, v) = match e {
        LedgerEvent::BudgetReduced {
            t_s,
            domain,
            limit_w,
            source,
        } => (
            "budget-reduced",
            json!({"at": t(*t_s), "domain": domain, "limit_w": limit_w,
                   "source": source.map(coolplane_controller::ledger::source_name)}),
        ),
        LedgerEvent::CapReduced {
            t_s,
            lease,
            external_id,
            granted_w,
            domain,
        } => (
            "cap-reduced",
            json!({"at": t(*t_s), "allocation": lease, "external_id": external_id, "granted_w": granted_w, "domain": domain}),
        ),
        LedgerEvent::Preempting {
            t_s,
            lease,
            external_id,
            until_s,
            domain,
        } => (
            "preempting",
            json!({"at": t(*t_s), "allocation": lease, "external_id": external_id, "grace_until": t(*until_s), "domain": domain}),
        ),
        LedgerEvent::Ended {
            t_s,
            lease,
            external_id,
            state,
        } => (
            match state {
                coolplane_controller::ledger::LeaseState::Expired => "expired",
                coolplane_controller::ledger::LeaseState::Preempted => "preempted",
                _ => "released",
            },
            json!({"at": t(*t_s), "allocation": lease, "external_id": external_id}),
        ),
        LedgerEvent::DomainStale { t_s, domain, stale } => (
            if *stale { "domain-stale" } else { "domain-fresh" },
            json!({"at": t(*t_s), "domain": domain}),
        ),
        LedgerEvent::CoolingLimited { t_s, domain, limit_w } => (
            "cooling-limited",
            json!({"at": t(*t_s), "domain": domain, "limit_w": limit_w}),
        ),
        LedgerEvent::LimitBelowFloor {
            t_s,
            domain,
            limit_w,
            load_w,
        } => (
            "limit-below-floor",
            json!({"at": t(*t_s), "domain": domain, "limit_w": limit_w, "load_w": load_w}),
        ),
    };
    (kind, v.to_string())
}

/// Serve the API on `listener` until `shutdown` resolves; open connections (event streams) get
/// two seconds to close.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ApiState,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let (tx, mut rx) = tokio::sync::watch::channel(false);
    let server = axum::serve(listener, app(state)).with_graceful_shutdown(async move {
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
        _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => Ok(()),
    }
}

/// The OpenAPI document as served (pretty JSON with a final newline).
pub fn openapi_json() -> String {
    use utoipa::OpenApi;
    let mut s = ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serialises");
    s.push('\n');
    s
}
