//! HTTP tests of the budget API without a server (`app().oneshot(req)`): authentication and roles,
//! problem+json errors, idempotent creation, expiry reverting caps, limit drops, fail-closed
//! staleness, the Kubernetes extender's wire types, metrics, and the committed OpenAPI document.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use coolplane_core::signals::{Actions, Measurements, Reading};
use coolplane_core::site::builtin_site;
use coolplane_core::topology::Topology;
use coolplane_runtime::http::{app, openapi_json, ApiConfig, ApiState, Role, TokenConfig};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tower::ServiceExt;

const OP: &str = "operator-token-0123456789";
const SCHED: &str = "scheduler-token-0123456789";
const VIEW: &str = "viewer-token-0123456789";
const EPOCH: f64 = 1_796_097_600.0; // 2026-12-01T04:00:00Z

struct Env {
    st: ApiState,
    clock: Arc<AtomicU64>,
    topo: Topology,
}

impl Env {
    fn new() -> Self {
        let site = builtin_site("hall-10k").unwrap();
        let clock = Arc::new(AtomicU64::new(0f64.to_bits()));
        let c = clock.clone();
        let cfg = ApiConfig {
            tokens: [
                ("op", OP, Role::Operator),
                ("sched", SCHED, Role::Scheduler),
                ("view", VIEW, Role::Viewer),
            ]
            .iter()
            .map(|(n, t, r)| TokenConfig {
                name: n.to_string(),
                token: t.to_string(),
                role: *r,
            })
            .collect(),
            ..ApiConfig::default()
        };
        cfg.validate().unwrap();
        let st = ApiState::new(
            &site,
            &cfg,
            Arc::new(move || f64::from_bits(c.load(Ordering::SeqCst))),
            EPOCH,
            180.0,
        );
        Self {
            st,
            clock,
            topo: Topology::new(&site),
        }
    }
    fn set_time(&self, t: f64) {
        self.clock.store(t.to_bits(), Ordering::SeqCst);
    }
    /// A fresh process image at time `t` (every reading good), with rack `stale_rack` 1000 s old.
    fn image(&self, t: f64, stale_rack: Option<usize>) -> Measurements {
        let n = self.topo.gpu_count;
        let mut m = Measurements {
            t_s: t,
            cdus: vec![Default::default(); self.topo.cdus.len()],
            facilities: vec![Default::default(); self.topo.halls.len()],
            racks: vec![Default::default(); self.topo.racks.len()],
            ..Default::default()
        };
        for c in &mut m.cdus {
            c.supply_temp_c = Reading::good(40.0, t);
            c.flow_lpm = Reading::good(2000.0, t);
            c.heat_kw = Reading::good(1000.0, t);
        }
        for f in &mut m.facilities {
            f.supply_temp_c = Reading::good(32.0, t);
        }
        for (i, r) in m.racks.iter_mut().enumerate() {
            let ts = if Some(i) == stale_rack { t - 1000.0 } else { t };
            r.it_power_kw = Reading::good(60.0, ts);
        }
        m.gpus.t_s = t;
        m.gpus.power_w = vec![150.0; n];
        m.gpus.power_limit_w = vec![1000.0; n];
        m.gpus.temp_c = vec![50.0; n];
        m.gpus.util = vec![0.0; n];
        m.gpus.clock_events = vec![0; n];
        m.meter.facility_power_kw = Reading::good(12_000.0, t);
        m.meter.it_power_kw = Reading::good(11_000.0, t);
        m.meter.power_budget_kw = Reading::good(20_000.0, t);
        m
    }
    fn tick(&self, t: f64, stale_rack: Option<usize>) -> Actions {
        self.set_time(t);
        let mut a = Actions::default();
        self.st.on_tick(t, &self.image(t, stale_rack), &mut a);
        a
    }
    async fn call(
        &self,
        method: &str,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
        key: Option<&str>,
    ) -> (StatusCode, String, Value, axum::http::HeaderMap) {
        let mut b = Request::builder().method(method).uri(uri);
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        if let Some(k) = key {
            b = b.header("idempotency-key", k);
        }
        let req = match body {
            Some(v) => b
                .header("content-type", "application/json")
                .body(Body::from(v.to_string()))
                .unwrap(),
            None => b.body(Body::empty()).unwrap(),
        };
        let r = app(self.st.clone()).oneshot(req).await.unwrap();
        let status = r.status();
        let headers = r.headers().clone();
        let ct = headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 24).await.unwrap();
        let v = serde_json::from_slice(&bytes).unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
        (status, ct, v, headers)
    }
}

fn alloc_body(node: &str, request_w: f64, ttl_s: f64) -> Value {
    json!({"external_id": "slurm-4242", "nodes": [{"node": node}], "min_w": 600.0, "request_w": request_w, "ttl_s": ttl_s})
}

#[tokio::test]
async fn no_token_no_access_except_health_and_roles_are_enforced() {
    let e = Env::new();
    let (s, _, v, _) = e.call("GET", "/healthz", None, None, None).await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("ok")));
    // Not ready before the first feed.
    assert_eq!(
        e.call("GET", "/readyz", None, None, None).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    e.tick(10.0, None);
    assert_eq!(e.call("GET", "/readyz", None, None, None).await.0, StatusCode::OK);
    for uri in [
        "/v1/domains",
        "/v1/forecast",
        "/metrics",
        "/v1/allocations?external_id=x",
    ] {
        let (s, ct, v, h) = e.call("GET", uri, None, None, None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{uri}");
        assert_eq!(ct, "application/problem+json");
        assert_eq!(v["status"], 401);
        assert!(h.get("www-authenticate").is_some());
        assert_eq!(
            e.call("GET", uri, Some("not-a-token"), None, None).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            e.call("GET", uri, Some(VIEW), None, None).await.0,
            StatusCode::OK,
            "{uri}"
        );
    }
    // A viewer cannot lease, a scheduler cannot override limits.
    let (s, ct, v, _) = e
        .call(
            "POST",
            "/v1/allocations",
            Some(VIEW),
            Some(alloc_body("hall-a-r001-n01", 900.0, 300.0)),
            Some("k1"),
        )
        .await;
    assert_eq!((s, ct.as_str()), (StatusCode::FORBIDDEN, "application/problem+json"));
    assert!(v["detail"].as_str().unwrap().contains("scheduler"));
    let o = json!({"watts": 1.0e7, "expires_at": "2026-12-01T05:00:00Z"});
    assert_eq!(
        e.call("PUT", "/v1/domains/hall-10k/limit", Some(SCHED), Some(o.clone()), None)
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    let (s, _, v, _) = e
        .call("PUT", "/v1/domains/hall-10k/limit", Some(OP), Some(o), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["limit_source"], "override");
    assert_eq!(v["limits"]["override"]["expires_at"], "2026-12-01T05:00:00.000Z");
}

#[tokio::test]
async fn errors_are_problem_json_naming_what_was_wrong() {
    let e = Env::new();
    e.tick(10.0, None);
    type Case<'a> = (
        &'a str,
        &'a str,
        Option<Value>,
        Option<&'a str>,
        StatusCode,
        Option<&'a str>,
    );
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/v1/allocations",
            Some(alloc_body("no-such-node", 900.0, 300.0)),
            Some("a"),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("nodes"),
        ),
        (
            "POST",
            "/v1/allocations",
            Some(alloc_body("hall-a-r001-n01", 900.0, 300.0)),
            None,
            StatusCode::BAD_REQUEST,
            Some("Idempotency-Key"),
        ),
        (
            "POST",
            "/v1/allocations",
            Some(alloc_body("hall-a-r001-n01", 5000.0, 300.0)),
            Some("b"),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("request_w"),
        ),
        (
            "POST",
            "/v1/allocations",
            Some(alloc_body("hall-a-r001-n01", 900.0, -1.0)),
            Some("c"),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("ttl_s"),
        ),
        (
            "POST",
            "/v1/allocations",
            Some(json!({"external_id": 1})),
            Some("d"),
            StatusCode::UNPROCESSABLE_ENTITY,
            None,
        ),
        (
            "POST",
            "/v1/feasibility",
            Some(json!({"nodes": [], "request_w": 900.0})),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("nodes"),
        ),
        (
            "PUT",
            "/v1/domains/hall-10k/limit",
            Some(json!({"watts": 1.0, "expires_at": "tomorrow"})),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("expires_at"),
        ),
        (
            "PUT",
            "/v1/domains/hall-10k/limit",
            Some(json!({"watts": 1.0, "expires_at": "2020-01-01T00:00:00Z"})),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("expires_at"),
        ),
        ("GET", "/v1/allocations/99", None, None, StatusCode::NOT_FOUND, None),
        ("GET", "/v1/allocations/abc", None, None, StatusCode::NOT_FOUND, None),
        ("GET", "/v1/domains/nowhere", None, None, StatusCode::NOT_FOUND, None),
        (
            "GET",
            "/v1/domains?kind=galaxy",
            None,
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("kind"),
        ),
        ("GET", "/v2/whatever", None, None, StatusCode::NOT_FOUND, None),
        (
            "DELETE",
            "/v1/feasibility",
            None,
            None,
            StatusCode::METHOD_NOT_ALLOWED,
            None,
        ),
    ];
    for (m, uri, body, key, want, field) in cases {
        let (s, ct, v, _) = e.call(m, uri, Some(OP), body, key).await;
        assert_eq!(s, want, "{m} {uri}: {v}");
        assert_eq!(ct, "application/problem+json", "{m} {uri}");
        assert_eq!(v["status"], want.as_u16(), "{m} {uri}");
        assert!(!v["detail"].as_str().unwrap().is_empty());
        if let Some(f) = field {
            assert_eq!(v["field"], f, "{m} {uri}: {v}");
        }
    }
    // Malformed JSON.
    let req = Request::post("/v1/feasibility")
        .header("authorization", format!("Bearer {OP}"))
        .header("content-type", "application/json")
        .body(Body::from("{not json"))
        .unwrap();
    let r = app(e.st.clone()).oneshot(req).await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
}

#[tokio::test]
async fn creation_is_idempotent_and_a_duplicate_without_the_key_is_refused() {
    let e = Env::new();
    e.tick(10.0, None);
    let body = alloc_body("hall-a-r001-n01", 900.0, 300.0);
    let (s, _, a, h) = e
        .call(
            "POST",
            "/v1/allocations",
            Some(SCHED),
            Some(body.clone()),
            Some("job-4242-try"),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{a}");
    assert_eq!(a["granted_w"], 900.0);
    assert_eq!(a["state"], "active");
    assert_eq!(a["expires_at"], "2026-12-01T04:05:10.000Z");
    assert_eq!(h["location"], format!("/v1/allocations/{}", a["id"]));
    // The prolog retries: same key, same body → the same allocation.
    let (s, _, b, h) = e
        .call(
            "POST",
            "/v1/allocations",
            Some(SCHED),
            Some(body.clone()),
            Some("job-4242-try"),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(b["id"], a["id"]);
    assert_eq!(h["idempotent-replayed"], "true");
    // Same key, other body → refused.
    let (s, _, v, _) = e
        .call(
            "POST",
            "/v1/allocations",
            Some(SCHED),
            Some(alloc_body("hall-a-r001-n01", 800.0, 300.0)),
            Some("job-4242-try"),
        )
        .await;
    assert_eq!(
        (s, v["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("Idempotency-Key"))
    );
    // Another key for the same GPUs → 409: the GPUs are leased.
    let (s, _, v, _) = e
        .call("POST", "/v1/allocations", Some(SCHED), Some(body), Some("other"))
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    // Listed by the scheduler's job id; exactly one.
    let (_, _, l, _) = e
        .call("GET", "/v1/allocations?external_id=slurm-4242", Some(VIEW), None, None)
        .await;
    assert_eq!(l["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn caps_reach_the_racks_and_revert_on_expiry_and_release() {
    let e = Env::new();
    let first = e.tick(10.0, None);
    // Observe mode: the first tick sends every rack its caps (TDP: unleased GPUs are not capped).
    assert_eq!(first.power_limits.len(), e.topo.racks.len());
    assert!(first
        .power_limits
        .iter()
        .all(|p| p.limits_w.iter().all(|&w| w == 1000.0)));
    let (s, _, a, _) = e
        .call(
            "POST",
            "/v1/allocations",
            Some(SCHED),
            Some(alloc_body("hall-a-r001-n02", 700.0, 60.0)),
            Some("k"),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{a}");
    let id = a["id"].as_u64().unwrap();
    let acts = e.tick(20.0, None);
    assert_eq!(acts.power_limits.len(), 1, "only the changed rack");
    let p = &acts.power_limits[0];
    assert_eq!(p.rack, 0);
    assert_eq!(&p.limits_w[..4], &[1000.0; 4], "node 1 untouched");
    assert_eq!(&p.limits_w[4..8], &[700.0; 4], "node 2 capped at the grant");
    // Renewed at t = 50: still live at t = 100, expired at t = 115.
    let (s, _, r, _) = e
        .call("POST", &format!("/v1/allocations/{id}/renew"), Some(SCHED), None, None)
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    e.set_time(50.0);
    e.call(
        "POST",
        &format!("/v1/allocations/{id}/renew"),
        Some(SCHED),
        Some(json!({})),
        None,
    )
    .await;
    assert!(e.tick(100.0, None).power_limits.is_empty());
    let acts = e.tick(115.0, None);
    assert_eq!(acts.power_limits.len(), 1);
    assert_eq!(
        &acts.power_limits[0].limits_w[4..8],
        &[1000.0; 4],
        "caps revert on expiry"
    );
    let (_, _, g, _) = e
        .call("GET", &format!("/v1/allocations/{id}"), Some(VIEW), None, None)
        .await;
    assert_eq!(g["state"], "expired");
    assert_eq!(g["ended_at"], "2026-12-01T04:01:55.000Z");
    // Release of another lease reverts its caps too.
    let (_, _, b, _) = e
        .call(
            "POST",
            "/v1/allocations",
            Some(SCHED),
            Some(alloc_body("hall-a-r002-n01", 650.0, 600.0)),
            Some("k2"),
        )
        .await;
    let acts = e.tick(120.0, None);
    assert_eq!(&acts.power_limits[0].limits_w[..4], &[650.0; 4]);
    let (s, _, d, _) = e
        .call(
            "DELETE",
            &format!("/v1/allocations/{}", b["id"]),
            Some(SCHED),
            None,
            None,
        )
        .await;
    assert_eq!((s, d["state"].as_str()), (StatusCode::OK, Some("released")));
    let acts = e.tick(130.0, None);
    assert_eq!(&acts.power_limits[0].limits_w[..4], &[1000.0; 4]);
    // Renewing or deleting a lease that ended: 404.
    assert_eq!(
        e.call("DELETE", &format!("/v1/allocations/{id}"), Some(SCHED), None, None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_limit_drop_reduces_grants_at_once_and_stale_telemetry_fails_closed() {
    let e = Env::new();
    e.tick(10.0, None);
    let (_, _, lo, _) = e.call("POST", "/v1/allocations", Some(SCHED), Some(json!({"external_id": "lo", "nodes": [{"node": "hall-a-r001-n01"}], "min_w": 500.0, "request_w": 1000.0, "priority": 1})), Some("lo")).await;
    let (_, _, hi, _) = e.call("POST", "/v1/allocations", Some(SCHED), Some(json!({"external_id": "hi", "nodes": [{"node": "hall-a-r001-n02"}], "min_w": 1000.0, "request_w": 1000.0, "priority": 9, "preemptible": false})), Some("hi")).await;
    let (_, _, rack, _) = e.call("GET", "/v1/domains/hall-a-r001", Some(VIEW), None, None).await;
    let load = rack["load_w"].as_f64().unwrap();
    // Take 1,500 W off rack 1: the low-priority lease gives it (4 GPUs × 1.25 overhead → 300 W each).
    let o = json!({"watts": load - 1500.0, "expires_at": "2026-12-01T06:00:00Z", "reason": "PDU maintenance"});
    let (s, _, d, _) = e
        .call("PUT", "/v1/domains/hall-a-r001/limit", Some(OP), Some(o), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert!(d["headroom_w"].as_f64().unwrap() >= -1e-3, "{d}");
    let (_, _, l, _) = e
        .call("GET", &format!("/v1/allocations/{}", lo["id"]), Some(VIEW), None, None)
        .await;
    let g = l["granted_w"].as_f64().unwrap();
    assert!((699.0..=700.0).contains(&g), "{l}");
    assert_eq!(l["degraded"], true);
    let (_, _, h, _) = e
        .call("GET", &format!("/v1/allocations/{}", hi["id"]), Some(VIEW), None, None)
        .await;
    assert_eq!(h["granted_w"], 1000.0);
    let acts = e.tick(20.0, None);
    assert!(acts.power_limits[0].limits_w[..4]
        .iter()
        .all(|&w| (w as f64 - g).abs() < 0.01));
    // Stale rack telemetry: feasibility says no, creation refuses (fail closed).
    e.tick(30.0, Some(1));
    let q = json!({"nodes": [{"node": "hall-a-r002-n01"}], "request_w": 800.0});
    let (s, _, f, _) = e
        .call("POST", "/v1/feasibility", Some(SCHED), Some(q.clone()), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(f["feasible"], false);
    assert!(f["reason"].as_str().unwrap().contains("stale"), "{f}");
    assert_eq!(f["nodes"][0]["score"], 0);
    let (s, _, v, _) = e
        .call(
            "POST",
            "/v1/allocations",
            Some(SCHED),
            Some(alloc_body("hall-a-r002-n01", 800.0, 60.0)),
            Some("s"),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["domain"], "hall-a-r002");
    // Fresh again: feasible, and the check changed nothing.
    e.tick(40.0, None);
    let before = e.call("GET", "/v1/domains/hall-10k", Some(VIEW), None, None).await.2;
    let (_, _, f, _) = e.call("POST", "/v1/feasibility", Some(SCHED), Some(q), None).await;
    assert_eq!(
        (f["feasible"].as_bool(), f["grant_w"].as_f64()),
        (Some(true), Some(800.0))
    );
    assert!(f["nodes"][0]["score"].as_u64().unwrap() > 0);
    assert_eq!(
        e.call("GET", "/v1/domains/hall-10k", Some(VIEW), None, None).await.2,
        before
    );
    // Placement advice fits a 16-GPU job within one CDU.
    let (s, _, p, _) = e
        .call(
            "POST",
            "/v1/placements",
            Some(SCHED),
            Some(json!({"gpus": 16, "w_per_gpu": 900.0})),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(p["feasible"], true, "{p}");
    assert_eq!(
        p["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["gpus"].as_u64().unwrap())
            .sum::<u64>(),
        16
    );
}

#[tokio::test]
async fn kubernetes_extender_speaks_the_upstream_wire_types() {
    let e = Env::new();
    e.tick(10.0, Some(2));
    let pod = json!({"metadata": {"name": "train-0", "annotations": {"coolplane.io/watts-per-gpu": "900"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}});
    let args = json!({"Pod": pod, "NodeNames": ["hall-a-r001-n01", "hall-a-r003-n01", "gpu-node-x"]});
    let (s, _, v, _) = e
        .call("POST", "/k8s/filter", Some(SCHED), Some(args.clone()), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["NodeNames"], json!(["hall-a-r001-n01"]));
    assert!(v["FailedNodes"]["hall-a-r003-n01"].as_str().unwrap().contains("stale"));
    assert!(v["FailedAndUnresolvableNodes"]["gpu-node-x"].is_string());
    assert_eq!(v["Error"], "");
    let (s, _, v, _) = e.call("POST", "/k8s/prioritize", Some(SCHED), Some(args), None).await;
    assert_eq!(s, StatusCode::OK);
    let scores: Vec<(String, i64)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["Host"].as_str().unwrap().to_string(), h["Score"].as_i64().unwrap()))
        .collect();
    assert_eq!(scores[0].0, "hall-a-r001-n01");
    assert!((1..=10).contains(&scores[0].1));
    assert_eq!((scores[1].1, scores[2].1), (0, 0));
    // Nodes as a NodeList: the answer is a filtered NodeList.
    let args = json!({"Pod": pod, "Nodes": {"items": [{"metadata": {"name": "hall-a-r001-n01"}}, {"metadata": {"name": "hall-a-r003-n02"}}]}});
    let (_, _, v, _) = e.call("POST", "/k8s/filter", Some(SCHED), Some(args), None).await;
    assert_eq!(v["Nodes"]["items"].as_array().unwrap().len(), 1);
    assert!(v["NodeNames"].is_null());
    // `Nodes` or `Pod` of another JSON type is refused naming the field, never echoed back
    // (schemathesis found `{"Nodes": -24151724689}` answered 200 with the number in `Nodes`).
    for (bad, field) in [
        (json!({"Pod": pod, "Nodes": -24151724689_i64}), "Nodes"),
        (json!({"Pod": pod, "Nodes": ["hall-a-r001-n01"]}), "Nodes"),
        (json!({"Pod": 7, "NodeNames": ["hall-a-r001-n01"]}), "Pod"),
    ] {
        for path in ["/k8s/filter", "/k8s/prioritize"] {
            let (s, ct, v, _) = e.call("POST", path, Some(SCHED), Some(bad.clone()), None).await;
            assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{path} {bad}: {v}");
            assert!(ct.contains("application/problem+json"), "{ct}");
            assert!(v.to_string().contains(field), "{v}");
        }
    }
}

#[tokio::test]
async fn metrics_and_forecast_report_the_ledger() {
    let e = Env::new();
    e.tick(10.0, None);
    e.call(
        "POST",
        "/v1/allocations",
        Some(SCHED),
        Some(alloc_body("hall-a-r001-n01", 900.0, 600.0)),
        Some("m"),
    )
    .await;
    let (s, ct, v, _) = e.call("GET", "/metrics", Some(VIEW), None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(ct.starts_with("text/plain"));
    let text = v.as_str().unwrap();
    assert!(text.contains("coolplane_budget_leases_active 1\n"), "{text}");
    assert!(text.contains("coolplane_budget_allocations_created_total 1\n"));
    assert!(text.contains("coolplane_budget_limit_watts{domain=\"hall-10k\",kind=\"site\"} 20000000\n"));
    let (_, _, f, _) = e.call("GET", "/v1/forecast", Some(VIEW), None, None).await;
    let pts = f["points"].as_array().unwrap();
    // The lease (TTL 600 s) drops out of the forecast after its expiry unless renewed.
    let l0 = pts[0]["load_w"].as_f64().unwrap();
    let l_15m = pts[2]["load_w"].as_f64().unwrap();
    assert!((l0 - l_15m - 4.0 * 1.25 * 500.0).abs() < 1.0, "{l0} {l_15m}");
}

#[test]
fn the_committed_openapi_document_is_the_generated_one() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/openapi.json");
    let generated = openapi_json();
    if std::env::var_os("COOLPLANE_WRITE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "api/openapi.json differs from the document the code generates; regenerate it with \
         COOLPLANE_WRITE_OPENAPI=1 cargo test -p coolplane-runtime --test http"
    );
    let v: Value = serde_json::from_str(&generated).unwrap();
    for p in [
        "/v1/domains",
        "/v1/domains/{name}/limit",
        "/v1/feasibility",
        "/v1/placements",
        "/v1/allocations",
        "/v1/allocations/{id}",
        "/v1/allocations/{id}/renew",
        "/v1/forecast",
        "/v1/events",
        "/k8s/filter",
        "/k8s/prioritize",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(v["paths"][p].is_object(), "{p} missing");
    }
}
