//! Routes, authentication and the handlers of the budget API, with their OpenAPI annotations.

use super::dto::*;
use super::problem::{ApiError, Body, PathParam, QueryParams};
use super::{ApiState, Budget, Role};
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use coolplane_controller::ledger::{
    source_name, Domain, DomainKind, Lease, LeaseRequest, LeaseState, LimitOverride, NodeShare,
};
use std::convert::Infallible;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// Most node entries in one request.
const NODES_MAX: usize = 4096;

/// The OpenAPI document of the API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "coolplane power-budget API",
        description = "Leases of power and cooling for job schedulers: feasibility, placement, allocations with \
                       expiry, limit overrides, events; a Kubernetes scheduler extender. Watts, RFC 3339 UTC times, \
                       errors as application/problem+json.",
        license(name = "Apache-2.0")
    ),
    paths(
        healthz, readyz, metrics, list_domains, get_domain, put_limit, delete_limit, feasibility, placements,
        create_allocation, list_allocations, get_allocation, patch_allocation, renew_allocation,
        delete_allocation, forecast, events, super::k8s::filter, super::k8s::prioritize
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "health", description = "Liveness, readiness, metrics"),
        (name = "domains", description = "Power and cooling topology, limits, overrides"),
        (name = "scheduling", description = "Feasibility and placement (no side effects)"),
        (name = "allocations", description = "Leases of power for jobs"),
        (name = "kubernetes", description = "Scheduler extender")
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let c = openapi.components.get_or_insert_with(Default::default);
        c.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// The router (tests call it with `oneshot`).
pub fn app(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi_doc))
        .route("/v1/domains", get(list_domains))
        .route("/v1/domains/:name", get(get_domain))
        .route("/v1/domains/:name/limit", put(put_limit).delete(delete_limit))
        .route("/v1/feasibility", post(feasibility))
        .route("/v1/placements", post(placements))
        .route("/v1/allocations", post(create_allocation).get(list_allocations))
        .route(
            "/v1/allocations/:id",
            get(get_allocation).patch(patch_allocation).delete(delete_allocation),
        )
        .route("/v1/allocations/:id/renew", post(renew_allocation))
        .route("/v1/forecast", get(forecast))
        .route("/v1/events", get(events))
        .route("/k8s/filter", post(super::k8s::filter))
        .route("/k8s/prioritize", post(super::k8s::prioritize))
        .fallback(|| async { ApiError::not_found("no such resource") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "Method not allowed",
                "this method is not allowed here",
            )
        })
        .layer(axum::middleware::from_fn_with_state(state.clone(), count_requests))
        .layer(axum::extract::DefaultBodyLimit::max(1 << 20))
        .with_state(state)
}

async fn count_requests(State(st): State<ApiState>, req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let r = next.run(req).await;
    let code = r.status().as_u16();
    *st.lock().metrics.requests.entry((method, route, code)).or_default() += 1;
    r
}

/// The caller, authenticated by its bearer token.
pub struct Caller {
    /// Token name.
    pub name: String,
    /// Role.
    pub role: Role,
}

impl Caller {
    pub(super) fn need(&self, role: Role) -> Result<(), ApiError> {
        if self.role >= role {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!(
                    "this needs the {role:?} role; the token `{}` has {:?}",
                    self.name, self.role
                )
                .to_lowercase(),
            ))
        }
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[axum::async_trait]
impl FromRequestParts<ApiState> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, st: &ApiState) -> Result<Self, Self::Rejection> {
        let fail = |detail: &str| {
            st.lock().metrics.auth_failures += 1;
            ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", detail)
        };
        let Some(h) = parts.headers.get(header::AUTHORIZATION) else {
            return Err(fail("an `Authorization: Bearer <token>` header is required"));
        };
        let Some(tok) = h.to_str().ok().and_then(|s| s.strip_prefix("Bearer ")) else {
            return Err(fail("the Authorization header must be `Bearer <token>`"));
        };
        let tok = tok.trim().as_bytes();
        match st.tokens.iter().find(|t| ct_eq(t.token.as_bytes(), tok)) {
            Some(t) => Ok(Caller {
                name: t.name.clone(),
                role: t.role,
            }),
            None => Err(fail("unknown token")),
        }
    }
}

// ---- health ---------------------------------------------------------------------------------

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok".into() })
}

/// Readiness: the ledger has been fed from the process image and the site's telemetry is fresh.
#[utoipa::path(get, path = "/readyz", tag = "health", responses(
    (status = 200, body = Health),
    (status = 503, body = Problem, content_type = "application/problem+json")))]
async fn readyz(State(st): State<ApiState>) -> Result<Json<Health>, ApiError> {
    let b = st.lock();
    if !b.fed {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Not ready",
            "the ledger has not been fed from the process image yet",
        ));
    }
    if b.ledger.domains()[0].stale {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Not ready",
            "the site meter's telemetry is stale: nothing can be granted",
        ));
    }
    Ok(Json(Health { status: "ok".into() }))
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(get, path = "/metrics", tag = "health", security(("bearer" = [])), responses(
    (status = 200, body = String, content_type = "text/plain"),
    (status = 401, body = Problem, content_type = "application/problem+json")))]
async fn metrics(State(st): State<ApiState>, caller: Caller) -> Result<Response, ApiError> {
    caller.need(Role::Viewer)?;
    let b = st.lock();
    let mut s = String::new();
    let m = &b.metrics;
    let mut line = |name: &str, help: &str, kind: &str, rows: Vec<(String, f64)>| {
        s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, v) in rows {
            s.push_str(&format!("{name}{labels} {v}\n"));
        }
    };
    let mut req: Vec<_> = m.requests.iter().collect();
    req.sort();
    line(
        "coolplane_api_requests_total",
        "HTTP requests by method, route and status.",
        "counter",
        req.iter()
            .map(|((me, ro, co), n)| (format!("{{method=\"{me}\",route=\"{ro}\",code=\"{co}\"}}"), **n as f64))
            .collect(),
    );
    line(
        "coolplane_api_auth_failures_total",
        "Requests refused for want of a valid token.",
        "counter",
        vec![(String::new(), m.auth_failures as f64)],
    );
    line(
        "coolplane_budget_allocations_created_total",
        "Leases granted.",
        "counter",
        vec![(String::new(), m.allocations_created as f64)],
    );
    line(
        "coolplane_budget_allocations_refused_total",
        "Lease requests refused (not feasible, GPUs taken, invalid).",
        "counter",
        vec![(String::new(), m.allocations_refused as f64)],
    );
    line(
        "coolplane_budget_idempotent_replays_total",
        "Creations answered from an earlier request with the same Idempotency-Key.",
        "counter",
        vec![(String::new(), m.idempotent_replays as f64)],
    );
    line(
        "coolplane_budget_feasibility_checks_total",
        "Feasibility checks answered.",
        "counter",
        vec![(String::new(), m.feasibility_checks as f64)],
    );
    line(
        "coolplane_budget_ticks_total",
        "Ledger feeds from the process image.",
        "counter",
        vec![(String::new(), m.ticks as f64)],
    );
    line(
        "coolplane_budget_cap_commands_total",
        "Rack power-limit commands sent for the ledger.",
        "counter",
        vec![(String::new(), m.caps_commands as f64)],
    );
    let mut ev: Vec<_> = m.events.iter().collect();
    ev.sort();
    line(
        "coolplane_budget_events_total",
        "Ledger events by type.",
        "counter",
        ev.iter()
            .map(|(k, n)| (format!("{{type=\"{k}\"}}"), **n as f64))
            .collect(),
    );
    line(
        "coolplane_budget_events_dropped_total",
        "Ledger events dropped (queue full).",
        "counter",
        vec![(String::new(), b.ledger.events_dropped() as f64)],
    );
    line(
        "coolplane_budget_preemptions_total",
        "Leases preempted.",
        "counter",
        vec![(String::new(), b.ledger.preemptions() as f64)],
    );
    line(
        "coolplane_budget_cap_reductions_total",
        "Grant reductions after a limit dropped.",
        "counter",
        vec![(String::new(), b.ledger.cap_reductions() as f64)],
    );
    line(
        "coolplane_budget_leases_active",
        "Live leases.",
        "gauge",
        vec![(String::new(), b.ledger.lease_count() as f64)],
    );
    let stale = b.ledger.domains().iter().filter(|d| d.stale).count();
    line(
        "coolplane_budget_domains_stale",
        "Domains whose telemetry is stale.",
        "gauge",
        vec![(String::new(), stale as f64)],
    );
    let per_kind = |f: &dyn Fn(&Domain) -> f64| -> Vec<(String, f64)> {
        b.ledger
            .domains()
            .iter()
            .filter(|d| matches!(d.kind, DomainKind::Site | DomainKind::Hall | DomainKind::Cdu))
            .map(|d| {
                (
                    format!("{{domain=\"{}\",kind=\"{}\"}}", d.name, kind_name(d.kind)),
                    f(d),
                )
            })
            .filter(|(_, v)| v.is_finite())
            .collect()
    };
    line(
        "coolplane_budget_limit_watts",
        "Limit in force (site, halls, CDUs).",
        "gauge",
        per_kind(&|d| d.limit().0),
    );
    line(
        "coolplane_budget_load_watts",
        "Accounted load: baseline + unmanaged + granted.",
        "gauge",
        per_kind(&|d| d.load_w()),
    );
    line(
        "coolplane_budget_granted_watts",
        "Granted to leases above the floor.",
        "gauge",
        per_kind(&|d| d.granted_w()),
    );
    line(
        "coolplane_budget_lent_watts",
        "Part of the granted power lent to leases above their request (growth toward max_w).",
        "gauge",
        per_kind(&|d| d.grown_w()),
    );
    line(
        "coolplane_budget_unmanaged_watts",
        "Unmanaged load.",
        "gauge",
        per_kind(&|d| d.unmanaged_w),
    );
    drop(b);
    s.push_str(&st.daemon_metrics_text());
    let mut r = s.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(r)
}

async fn openapi_doc() -> Response {
    let mut r = super::openapi_json().into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

// ---- domains --------------------------------------------------------------------------------

fn kind_name(k: DomainKind) -> &'static str {
    match k {
        DomainKind::Site => "site",
        DomainKind::Hall => "hall",
        DomainKind::Cdu => "cdu",
        DomainKind::Rack => "rack",
        DomainKind::Node => "node",
    }
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

fn domain_out(st: &ApiState, b: &Budget, d: &Domain) -> DomainOut {
    let (limit, src) = d.limit();
    DomainOut {
        name: d.name.clone(),
        kind: kind_name(d.kind).into(),
        parent: d.parent.map(|p| b.ledger.domains()[p].name.clone()),
        limit_w: finite(limit),
        limit_source: src.map(|s| source_name(s).to_string()),
        limits: Limits {
            contract_w: d.contract_w,
            breaker_w: d.breaker_w,
            cooling_w: d.cooling_w,
            override_: d.override_.as_ref().map(|o| OverrideOut {
                watts: o.watts,
                expires_at: st.rfc3339(o.expires_s),
                reason: o.reason.clone(),
            }),
        },
        baseline_w: d.baseline_w(),
        unmanaged_w: d.unmanaged_w,
        granted_w: d.granted_w(),
        lent_w: d.grown_w(),
        load_w: d.load_w(),
        headroom_w: finite(d.headroom_w()),
        observed_w: d.observed_w,
        stale: d.stale,
        gpus: d.gpus,
        leased_gpus: d.leased_gpus,
    }
}

fn domain_id(b: &Budget, name: &str) -> Result<usize, ApiError> {
    b.ledger
        .domain_id(name)
        .ok_or_else(|| ApiError::not_found(format!("no domain `{name}`")))
}

/// List domains (paged; filter by kind or parent).
#[utoipa::path(get, path = "/v1/domains", tag = "domains", params(DomainQuery), security(("bearer" = [])),
    responses((status = 200, body = DomainPage),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json")))]
async fn list_domains(
    State(st): State<ApiState>,
    caller: Caller,
    QueryParams(q): QueryParams<DomainQuery>,
) -> Result<Json<DomainPage>, ApiError> {
    caller.need(Role::Viewer)?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::invalid("limit", format!("{limit} is outside 1–1000")));
    }
    let kind = match q.kind.as_deref() {
        None => None,
        Some(k) => Some(
            [
                DomainKind::Site,
                DomainKind::Hall,
                DomainKind::Cdu,
                DomainKind::Rack,
                DomainKind::Node,
            ]
            .into_iter()
            .find(|x| kind_name(*x) == k)
            .ok_or_else(|| ApiError::invalid("kind", format!("`{k}` is not site, hall, cdu, rack or node")))?,
        ),
    };
    let b = st.lock();
    let parent = match q.parent.as_deref() {
        None => None,
        Some(p) => Some(domain_id(&b, p)?),
    };
    let matching: Vec<&Domain> = b
        .ledger
        .domains()
        .iter()
        .filter(|d| kind.is_none_or(|k| d.kind == k) && parent.is_none_or(|p| d.parent == Some(p)))
        .collect();
    let items = matching
        .iter()
        .skip(q.offset.unwrap_or(0))
        .take(limit)
        .map(|d| domain_out(&st, &b, d))
        .collect();
    Ok(Json(DomainPage {
        items,
        total: matching.len(),
    }))
}

/// One domain: limits, provisioned, observed, headroom, staleness.
#[utoipa::path(get, path = "/v1/domains/{name}", tag = "domains", security(("bearer" = [])),
    params(("name" = String, Path, description = "Domain name")),
    responses((status = 200, body = DomainOut),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn get_domain(
    State(st): State<ApiState>,
    caller: Caller,
    PathParam(name): PathParam<String>,
) -> Result<Json<DomainOut>, ApiError> {
    caller.need(Role::Viewer)?;
    let b = st.lock();
    let id = domain_id(&b, &name)?;
    Ok(Json(domain_out(&st, &b, &b.ledger.domains()[id])))
}

/// Override a domain's limit until a given time (operator or grid). A lower limit takes effect
/// at once: grants are reduced in priority order and the affected allocations are told.
#[utoipa::path(put, path = "/v1/domains/{name}/limit", tag = "domains", security(("bearer" = [])),
    params(("name" = String, Path, description = "Domain name")),
    request_body = LimitOverrideIn,
    responses((status = 200, body = DomainOut),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 415, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json")))]
async fn put_limit(
    State(st): State<ApiState>,
    caller: Caller,
    PathParam(name): PathParam<String>,
    Body(o): Body<LimitOverrideIn>,
) -> Result<Json<DomainOut>, ApiError> {
    caller.need(Role::Operator)?;
    let now = st.now_s();
    let expires = st
        .plant_s(&o.expires_at)
        .map_err(|e| ApiError::invalid("expires_at", e))?;
    if o.reason.len() > 1024 {
        return Err(ApiError::invalid("reason", "at most 1024 characters"));
    }
    let mut b = st.lock();
    let id = domain_id(&b, &name)?;
    b.ledger.set_override(
        id,
        Some(LimitOverride {
            watts: o.watts,
            expires_s: expires,
            reason: if o.reason.is_empty() {
                format!("override by {}", caller.name)
            } else {
                o.reason
            },
        }),
        now,
    )?;
    eprintln!(
        "coolplane api: {} set the limit of {name} to {} W until {}",
        caller.name, o.watts, o.expires_at
    );
    // A lower limit cuts grants now: send the racks their new caps without waiting for the tick.
    st.kick.notify_one();
    Ok(Json(domain_out(&st, &b, &b.ledger.domains()[id])))
}

/// Remove a domain's limit override.
#[utoipa::path(delete, path = "/v1/domains/{name}/limit", tag = "domains", security(("bearer" = [])),
    params(("name" = String, Path, description = "Domain name")),
    responses((status = 200, body = DomainOut),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn delete_limit(
    State(st): State<ApiState>,
    caller: Caller,
    PathParam(name): PathParam<String>,
) -> Result<Json<DomainOut>, ApiError> {
    caller.need(Role::Operator)?;
    let now = st.now_s();
    let mut b = st.lock();
    let id = domain_id(&b, &name)?;
    b.ledger.set_override(id, None, now)?;
    eprintln!("coolplane api: {} removed the limit override of {name}", caller.name);
    st.kick.notify_one();
    Ok(Json(domain_out(&st, &b, &b.ledger.domains()[id])))
}

// ---- feasibility and placement --------------------------------------------------------------

fn shares(b: &Budget, nodes: &[NodeGpus]) -> Result<Vec<NodeShare>, ApiError> {
    if nodes.is_empty() || nodes.len() > NODES_MAX {
        return Err(ApiError::invalid("nodes", format!("1 to {NODES_MAX} entries")));
    }
    nodes
        .iter()
        .map(|n| {
            let id = b
                .ledger
                .domain_id(&n.node)
                .filter(|&d| b.ledger.domains()[d].kind == DomainKind::Node)
                .ok_or_else(|| ApiError::invalid("nodes", format!("`{}` is not a node", n.node)))?;
            Ok(NodeShare {
                node: id,
                gpus: n.gpus.unwrap_or(b.ledger.domains()[id].gpus),
            })
        })
        .collect()
}

fn headroom_out(b: &Budget, node: usize) -> NodeHeadroomOut {
    let h = b.ledger.node_headroom(node).expect("a node");
    NodeHeadroomOut {
        node: b.ledger.domains()[node].name.clone(),
        headroom_w: h.headroom_w,
        grantable_w_per_gpu: (b.ledger.floor_w() + h.headroom_w_per_gpu).min(b.ledger.tdp_w()),
        score: h.score,
        limiting_domain: b.ledger.domains()[h.limiting].name.clone(),
        stale: h.stale,
        free_gpus: h.free_gpus,
    }
}

fn request_of(
    b: &Budget,
    external_id: String,
    nodes: &[NodeGpus],
    min_w: Option<f64>,
    request_w: Option<f64>,
    max_w: Option<f64>,
) -> Result<LeaseRequest, ApiError> {
    let tdp = b.ledger.tdp_w();
    let request_w = request_w.unwrap_or(tdp);
    Ok(LeaseRequest {
        external_id,
        nodes: shares(b, nodes)?,
        min_w: min_w.unwrap_or(request_w),
        request_w,
        max_w: max_w.unwrap_or(request_w),
        priority: 0,
        preemptible: true,
        ttl_s: 300.0,
    })
}

/// Could this job get this power now? No side effects. Answers per node headroom and a 0–10 score
/// too; a stale domain on the path answers "not feasible" (fail closed).
#[utoipa::path(post, path = "/v1/feasibility", tag = "scheduling", security(("bearer" = [])),
    request_body = FeasibilityIn,
    responses((status = 200, body = FeasibilityOut),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 415, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json")))]
async fn feasibility(
    State(st): State<ApiState>,
    caller: Caller,
    Body(q): Body<FeasibilityIn>,
) -> Result<Json<FeasibilityOut>, ApiError> {
    caller.need(Role::Scheduler)?;
    let mut b = st.lock();
    b.metrics.feasibility_checks += 1;
    let r = request_of(&b, "feasibility".into(), &q.nodes, q.min_w, q.request_w, None)?;
    let mut nodes: Vec<usize> = r.nodes.iter().map(|s| s.node).collect();
    nodes.dedup();
    let per_node = nodes.iter().map(|&n| headroom_out(&b, n)).collect();
    let out = match b.ledger.feasibility(&r) {
        Ok(f) => FeasibilityOut {
            feasible: f.feasible,
            grant_w: f.grant_w,
            degraded: f.degraded,
            limiting_domain: f.limiting.map(|d| b.ledger.domains()[d].name.clone()),
            reason: f.reason,
            nodes: per_node,
        },
        Err(coolplane_controller::ledger::LedgerError::GpusTaken { node, free, asked }) => FeasibilityOut {
            feasible: false,
            grant_w: 0.0,
            degraded: false,
            limiting_domain: Some(node.clone()),
            reason: Some(format!("node `{node}` has {free} GPUs free, {asked} asked")),
            nodes: per_node,
        },
        Err(e) => return Err(e.into()),
    };
    Ok(Json(out))
}

/// Where would the controller like this job? Picks the CDU (cooling loop) with the most headroom
/// that can hold the whole job at the asked power, then its nodes with the most headroom.
#[utoipa::path(post, path = "/v1/placements", tag = "scheduling", security(("bearer" = [])),
    request_body = PlacementIn,
    responses((status = 200, body = PlacementOut),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 415, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json")))]
async fn placements(
    State(st): State<ApiState>,
    caller: Caller,
    Body(q): Body<PlacementIn>,
) -> Result<Json<PlacementOut>, ApiError> {
    caller.need(Role::Scheduler)?;
    let b = st.lock();
    let l = &b.ledger;
    if q.gpus == 0 || q.gpus > 65_536 {
        return Err(ApiError::invalid("gpus", format!("{} is outside 1–65536", q.gpus)));
    }
    let w = q.w_per_gpu.unwrap_or(l.tdp_w());
    if !(w.is_finite() && w >= l.floor_w() && w <= l.tdp_w()) {
        return Err(ApiError::invalid(
            "w_per_gpu",
            format!("{w} W is outside [{}, {}]", l.floor_w(), l.tdp_w()),
        ));
    }
    if let Some(d) = q.duration_s {
        if !(d.is_finite() && d > 0.0) {
            return Err(ApiError::invalid("duration_s", "must be a positive number of seconds"));
        }
    }
    // Candidate nodes per CDU: fresh, free GPUs, enough per-GPU headroom.
    let mut by_cdu: std::collections::BTreeMap<usize, Vec<(f64, usize, u32)>> = Default::default();
    for i in 0..l.node_count() {
        let n = l.node_domain(i).expect("node");
        let h = l.node_headroom(n).expect("node");
        if h.stale || h.free_gpus == 0 || l.floor_w() + h.headroom_w_per_gpu < w {
            continue;
        }
        let cdu = l.path(n).expect("node")[2];
        by_cdu.entry(cdu).or_default().push((h.headroom_w, n, h.free_gpus));
    }
    let mut cdus: Vec<(f64, usize)> = by_cdu
        .keys()
        .map(|&c| (l.domains()[c].headroom_w(), c))
        .filter(|(h, _)| h.is_finite())
        .collect();
    cdus.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, c) in cdus {
        let mut cands = by_cdu.remove(&c).unwrap_or_default();
        cands.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut left = q.gpus;
        let mut nodes = Vec::new();
        for (_, n, free) in cands {
            if left == 0 {
                break;
            }
            let take = free.min(left);
            left -= take;
            nodes.push(NodeShare { node: n, gpus: take });
        }
        if left > 0 {
            continue;
        }
        let r = LeaseRequest {
            external_id: "placement".into(),
            nodes: nodes.clone(),
            min_w: w,
            request_w: w,
            max_w: w,
            priority: 0,
            preemptible: true,
            ttl_s: 300.0,
        };
        if let Ok(f) = l.feasibility(&r) {
            if f.feasible {
                return Ok(Json(PlacementOut {
                    feasible: true,
                    nodes: nodes
                        .iter()
                        .map(|s| NodeGpus {
                            node: l.domains()[s.node].name.clone(),
                            gpus: Some(s.gpus),
                        })
                        .collect(),
                    cdu: Some(l.domains()[c].name.clone()),
                    grant_w: f.grant_w,
                    reason: None,
                }));
            }
        }
    }
    Ok(Json(PlacementOut {
        feasible: false,
        nodes: Vec::new(),
        cdu: None,
        grant_w: 0.0,
        reason: Some(format!(
            "no cooling loop has {} free GPUs with {w} W each within every limit on their path",
            q.gpus
        )),
    }))
}

// ---- allocations ----------------------------------------------------------------------------

fn state_name(s: LeaseState) -> &'static str {
    match s {
        LeaseState::Active => "active",
        LeaseState::Preempting { .. } => "preempting",
        LeaseState::Released => "released",
        LeaseState::Expired => "expired",
        LeaseState::Preempted => "preempted",
    }
}

fn allocation_out(st: &ApiState, b: &Budget, l: &Lease) -> AllocationOut {
    let live = l.state.is_live();
    let unleased = match b.feed.config().unleased {
        coolplane_controller::budget::Unleased::Floor => b.ledger.floor_w(),
        coolplane_controller::budget::Unleased::Observe => b.ledger.tdp_w(),
    };
    let caps = l
        .request
        .nodes
        .iter()
        .map(|s| {
            let i = s.node - b.ledger.node_domain(0).expect("nodes exist");
            let g0 = b.node_gpu0[i];
            let gpn = b.ledger.domains()[s.node].gpus as usize;
            let mean = |v: &[f32]| {
                v.get(g0..g0 + gpn)
                    .map(|x| x.iter().map(|&y| y as f64).sum::<f64>() / gpn.max(1) as f64)
                    .filter(|x| x.is_finite())
            };
            let applied = mean(&b.applied_w);
            let cap = if live { l.granted_w } else { unleased };
            CapOut {
                node: b.ledger.domains()[s.node].name.clone(),
                gpus: s.gpus,
                cap_w: cap,
                applied_w: applied,
                observed_w: mean(&b.power_w),
                converged: applied
                    .is_some_and(|a| s.gpus as usize == gpn && (a - cap.min(b.ledger.tdp_w())).abs() <= 1.0),
            }
        })
        .collect();
    AllocationOut {
        id: l.id,
        external_id: l.request.external_id.clone(),
        state: state_name(l.state).into(),
        min_w: l.request.min_w,
        request_w: l.request.request_w,
        max_w: l.request.max_w,
        granted_w: if live { l.granted_w } else { 0.0 },
        growth_w: if live { l.growth_w() } else { 0.0 },
        degraded: live && l.degraded(),
        priority: l.request.priority,
        preemptible: l.request.preemptible,
        ttl_s: l.request.ttl_s,
        created_at: st.rfc3339(l.created_s),
        expires_at: st.rfc3339(l.expires_s),
        grace_until: match l.state {
            LeaseState::Preempting { until_s } => Some(st.rfc3339(until_s)),
            _ => None,
        },
        ended_at: l.ended_s.map(|t| st.rfc3339(t)),
        caps,
    }
}

fn idempotency_key(h: &HeaderMap) -> Result<String, ApiError> {
    let k = h.get("idempotency-key").ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "Idempotency-Key required",
            "creating an allocation needs an `Idempotency-Key` header (prologs retry)",
        )
        .field("Idempotency-Key")
    })?;
    let k = k
        .to_str()
        .map_err(|_| ApiError::invalid("Idempotency-Key", "must be visible ASCII"))?;
    if k.is_empty() || k.len() > 255 {
        return Err(ApiError::invalid("Idempotency-Key", "1 to 255 characters"));
    }
    Ok(k.to_string())
}

/// Lease power for a job. Idempotent: the same `Idempotency-Key` with the same body answers the
/// allocation created the first time; with another body, 422. Granted between `min_w` and
/// `request_w` per GPU (`degraded` when below the request), or refused (409) naming the limiting
/// domain; headroom left over is lent up to `max_w` at the next tick (`growth_w`), highest
/// priority first, and taken back first when a limit drops. Expires unless renewed; then its
/// caps revert.
#[utoipa::path(post, path = "/v1/allocations", tag = "allocations", security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, description = "Unique per creation (e.g. the job id and attempt)")),
    request_body = AllocationIn,
    responses((status = 201, body = AllocationOut, description = "Granted (or replayed)"),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 409, body = Problem, content_type = "application/problem+json", description = "Not feasible or GPUs taken"),
    (status = 415, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
    (status = 503, body = Problem, content_type = "application/problem+json")))]
async fn create_allocation(
    State(st): State<ApiState>,
    caller: Caller,
    headers: HeaderMap,
    Body(a): Body<AllocationIn>,
) -> Result<Response, ApiError> {
    caller.need(Role::Scheduler)?;
    let key = idempotency_key(&headers)?;
    let now = st.now_s();
    let fingerprint = serde_json::to_string(&a).unwrap_or_default();
    let mut b = st.lock();
    if let Some((fp, id)) = b.idem.get(&caller.name, &key).cloned() {
        if fp != fingerprint {
            b.metrics.allocations_refused += 1;
            return Err(ApiError::invalid(
                "Idempotency-Key",
                format!("key `{key}` was used with a different request body"),
            ));
        }
        b.metrics.idempotent_replays += 1;
        let l = b
            .ledger
            .lease(id)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("allocation {id} is gone")))?;
        let mut r = (StatusCode::CREATED, Json(allocation_out(&st, &b, &l))).into_response();
        r.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
        return Ok(r);
    }
    let mut r = request_of(&b, a.external_id.clone(), &a.nodes, a.min_w, a.request_w, a.max_w)?;
    r.priority = a.priority;
    r.preemptible = a.preemptible;
    r.ttl_s = a.ttl_s;
    match b.ledger.create(r, now) {
        Ok(id) => {
            b.metrics.allocations_created += 1;
            b.idem.put(&caller.name, &key, fingerprint, id);
            // A new lease may preempt or cut others: send the caps now.
            st.kick.notify_one();
            let l = b.ledger.lease(id).cloned().expect("just created");
            let out = allocation_out(&st, &b, &l);
            let mut resp = (StatusCode::CREATED, Json(out)).into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("/v1/allocations/{id}")) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            Ok(resp)
        }
        Err(e) => {
            b.metrics.allocations_refused += 1;
            Err(e.into())
        }
    }
}

/// Allocations of a job (by the scheduler's job id): live ones first, then recently ended.
#[utoipa::path(get, path = "/v1/allocations", tag = "allocations", security(("bearer" = [])),
    params(AllocationQuery),
    responses((status = 200, body = AllocationList),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json")))]
async fn list_allocations(
    State(st): State<ApiState>,
    caller: Caller,
    QueryParams(q): QueryParams<AllocationQuery>,
) -> Result<Json<AllocationList>, ApiError> {
    caller.need(Role::Viewer)?;
    let b = st.lock();
    let items = b
        .ledger
        .leases_by_external_id(&q.external_id)
        .take(1000)
        .map(|l| allocation_out(&st, &b, l))
        .collect();
    Ok(Json(AllocationList { items }))
}

/// An allocation: state, grant, caps applied, observed power, convergence.
#[utoipa::path(get, path = "/v1/allocations/{id}", tag = "allocations", security(("bearer" = [])),
    params(("id" = u64, Path, description = "Allocation id")),
    responses((status = 200, body = AllocationOut),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn get_allocation(
    State(st): State<ApiState>,
    caller: Caller,
    PathParam(id): PathParam<u64>,
) -> Result<Json<AllocationOut>, ApiError> {
    caller.need(Role::Viewer)?;
    let b = st.lock();
    let l = b
        .ledger
        .lease(id)
        .ok_or_else(|| ApiError::not_found(format!("no allocation {id}")))?;
    Ok(Json(allocation_out(&st, &b, l)))
}

/// Grow, shrink or re-prioritise a live allocation. Growth is granted as far as the headroom
/// allows (never through stale telemetry); shrinking always succeeds.
#[utoipa::path(patch, path = "/v1/allocations/{id}", tag = "allocations", security(("bearer" = [])),
    params(("id" = u64, Path, description = "Allocation id")),
    request_body = AllocationPatch,
    responses((status = 200, body = AllocationOut),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, body = Problem, content_type = "application/problem+json"),
    (status = 415, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json")))]
async fn patch_allocation(
    State(st): State<ApiState>,
    caller: Caller,
    PathParam(id): PathParam<u64>,
    Body(p): Body<AllocationPatch>,
) -> Result<Json<AllocationOut>, ApiError> {
    caller.need(Role::Scheduler)?;
    let now = st.now_s();
    let mut b = st.lock();
    let l = b
        .ledger
        .update(id, p.min_w, p.request_w, p.max_w, p.priority, now)?
        .clone();
    st.kick.notify_one();
    Ok(Json(allocation_out(&st, &b, &l)))
}

/// Heartbeat: the allocation now expires `ttl_s` (or its own TTL) from now.
#[utoipa::path(post, path = "/v1/allocations/{id}/renew", tag = "allocations", security(("bearer" = [])),
    params(("id" = u64, Path, description = "Allocation id")),
    request_body(content = Option<RenewIn>, description = "Optional new TTL"),
    responses((status = 200, body = AllocationOut),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 415, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json")))]
async fn renew_allocation(
    State(st): State<ApiState>,
    caller: Caller,
    PathParam(id): PathParam<u64>,
    body: axum::body::Bytes,
) -> Result<Json<AllocationOut>, ApiError> {
    caller.need(Role::Scheduler)?;
    let r: RenewIn = if body.iter().all(|c| c.is_ascii_whitespace()) {
        RenewIn::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "Bad request body", e.to_string()))?
    };
    let now = st.now_s();
    let mut b = st.lock();
    let l = b.ledger.renew(id, r.ttl_s, now)?.clone();
    Ok(Json(allocation_out(&st, &b, &l)))
}

/// Release an allocation; its caps revert at once (the daemon sends them without waiting for its tick).
#[utoipa::path(delete, path = "/v1/allocations/{id}", tag = "allocations", security(("bearer" = [])),
    params(("id" = u64, Path, description = "Allocation id")),
    responses((status = 200, body = AllocationOut),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn delete_allocation(
    State(st): State<ApiState>,
    caller: Caller,
    PathParam(id): PathParam<u64>,
) -> Result<Json<AllocationOut>, ApiError> {
    caller.need(Role::Scheduler)?;
    let now = st.now_s();
    let mut b = st.lock();
    let l = b.ledger.release(id, now)?;
    st.kick.notify_one();
    Ok(Json(allocation_out(&st, &b, &l)))
}

// ---- forecast and events --------------------------------------------------------------------

/// The site's load and headroom over the next four hours: unmanaged load held at its present
/// value (persistence), leases dropping out at their expiry unless renewed, overrides lapsing.
#[utoipa::path(get, path = "/v1/forecast", tag = "domains", security(("bearer" = [])),
    responses((status = 200, body = ForecastOut),
    (status = 401, body = Problem, content_type = "application/problem+json")))]
async fn forecast(State(st): State<ApiState>, caller: Caller) -> Result<Json<ForecastOut>, ApiError> {
    caller.need(Role::Viewer)?;
    let now = st.now_s();
    let b = st.lock();
    let l = &b.ledger;
    let site = &l.domains()[0];
    let points = [0.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14_400.0]
        .iter()
        .map(|&dt| {
            let t = now + dt;
            let mut limit = f64::INFINITY;
            for w in [site.contract_w, site.breaker_w, site.cooling_w].into_iter().flatten() {
                limit = limit.min(w);
            }
            if let Some(o) = &site.override_ {
                if o.expires_s > t {
                    limit = limit.min(o.watts);
                }
            }
            let granted: f64 = l
                .leases()
                .filter(|x| match x.state {
                    LeaseState::Preempting { until_s } => until_s > t,
                    _ => x.expires_s > t,
                })
                .map(|x| l.contribution_w(x, 0))
                .sum();
            let load = site.baseline_w() + site.unmanaged_w + granted;
            ForecastPoint {
                at: st.rfc3339(t),
                limit_w: finite(limit),
                load_w: load,
                headroom_w: finite(limit - load),
            }
        })
        .collect();
    Ok(Json(ForecastOut {
        method: "persistence+schedule".into(),
        points,
    }))
}

/// Server-sent events: `budget-reduced`, `cap-reduced`, `preempting` (with the grace period's
/// end), `expired`, `preempted`, `released`, `domain-stale`, `domain-fresh`, `cooling-limited`,
/// `limit-below-floor`. Each event's data is a JSON object with `at` (RFC 3339 UTC).
#[utoipa::path(get, path = "/v1/events", tag = "allocations", security(("bearer" = [])),
    responses((status = 200, body = String, content_type = "text/event-stream"),
    (status = 401, body = Problem, content_type = "application/problem+json")))]
async fn events(
    State(st): State<ApiState>,
    caller: Caller,
) -> Result<Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>>, ApiError> {
    caller.need(Role::Viewer)?;
    let rx = st.events.subscribe();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok((kind, data)) => Some((Ok(Event::default().event(kind).data(data)), rx)),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                let e = Event::default().event("lagged").data(format!("{{\"missed\":{n}}}"));
                Some((Ok(e), rx))
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

pub(super) fn node_headroom_by_name(b: &Budget, name: &str) -> Option<NodeHeadroomOut> {
    let id = b.ledger.domain_id(name)?;
    (b.ledger.domains()[id].kind == DomainKind::Node).then(|| headroom_out(b, id))
}
