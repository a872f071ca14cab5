//! Kubernetes scheduler extender (`k8s.io/kube-scheduler/extender/v1` wire types, capitalised Go
//! field names). `filter` keeps the nodes whose power and cooling path can take the pod's GPUs
//! at the asked power now; `prioritize` scores them 0–10 by headroom.
//!
//! The pod's GPU count is the sum of its containers' `nvidia.com/gpu` limits (or the annotation
//! `coolplane.io/gpus`); the power per GPU is the annotation `coolplane.io/watts-per-gpu`
//! (default: TDP). Nodes that are not coolplane node domains fail unresolvably (fail closed);
//! nodes behind stale telemetry fail (resolvable: the data may come back).

use super::dto::{ExtenderArgs, ExtenderFilterResult, HostPriority, Problem};
use super::handlers::{node_headroom_by_name, Caller};
use super::problem::{ApiError, Body};
use super::{ApiState, Role};
use axum::extract::State;
use axum::Json;
use serde_json::Value;
use std::collections::BTreeMap;

fn pod_gpus(pod: &Value) -> u32 {
    if let Some(n) = pod
        .pointer("/metadata/annotations/coolplane.io~1gpus")
        .and_then(|v| v.as_str())
        .and_then(|s| s.trim().parse::<u32>().ok())
    {
        return n;
    }
    pod.pointer("/spec/containers")
        .and_then(|c| c.as_array())
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.pointer("/resources/limits/nvidia.com~1gpu"))
                .filter_map(|v| match v {
                    Value::String(s) => s.trim().parse::<u32>().ok(),
                    Value::Number(n) => n.as_u64().map(|x| x.min(u32::MAX as u64) as u32),
                    _ => None,
                })
                .fold(0u32, |a, b| a.saturating_add(b))
        })
        .unwrap_or(0)
}

fn pod_watts(pod: &Value) -> Option<f64> {
    pod.pointer("/metadata/annotations/coolplane.io~1watts-per-gpu")
        .and_then(|v| v.as_str())
        .and_then(|s| s.trim().parse::<f64>().ok())
}

/// The upstream types are objects: a `Pod` or `Nodes` of another JSON type is a bad request
/// (answered as a problem naming the field, never echoed back).
fn check_args(args: &ExtenderArgs) -> Result<(), ApiError> {
    if !(args.pod.is_object() || args.pod.is_null()) {
        return Err(ApiError::invalid("Pod", "must be a v1.Pod object"));
    }
    if let Some(n) = &args.nodes {
        if !(n.is_object() || n.is_null()) {
            return Err(ApiError::invalid("Nodes", "must be a v1.NodeList object or null"));
        }
    }
    Ok(())
}

fn candidates(args: &ExtenderArgs) -> (Vec<String>, bool) {
    if let Some(n) = &args.node_names {
        return (n.clone(), true);
    }
    let names = args
        .nodes
        .as_ref()
        .and_then(|n| n.get("items"))
        .and_then(|i| i.as_array())
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.pointer("/metadata/name").and_then(|n| n.as_str()).map(String::from))
                .collect()
        })
        .unwrap_or_default();
    (names, false)
}

/// Filter: keep the nodes that can take the pod's GPUs at the asked power now.
#[utoipa::path(post, path = "/k8s/filter", tag = "kubernetes", security(("bearer" = [])),
    request_body = ExtenderArgs,
    responses((status = 200, body = ExtenderFilterResult),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 415, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json")))]
pub(super) async fn filter(
    State(st): State<ApiState>,
    caller: Caller,
    Body(args): Body<ExtenderArgs>,
) -> Result<Json<ExtenderFilterResult>, ApiError> {
    caller.need(Role::Scheduler)?;
    check_args(&args)?;
    let (names, by_name) = candidates(&args);
    let gpus = pod_gpus(&args.pod);
    let b = st.lock();
    let w = pod_watts(&args.pod).unwrap_or(b.ledger.tdp_w());
    let mut ok = Vec::new();
    let mut failed = BTreeMap::new();
    let mut unresolvable = BTreeMap::new();
    let mut error = String::new();
    if !(w.is_finite() && w >= b.ledger.floor_w() && w <= b.ledger.tdp_w()) {
        error = format!(
            "annotation coolplane.io/watts-per-gpu = {w}: outside [{}, {}] W",
            b.ledger.floor_w(),
            b.ledger.tdp_w()
        );
    }
    for n in names {
        if !error.is_empty() {
            break;
        }
        match node_headroom_by_name(&b, &n) {
            None => {
                unresolvable.insert(n, "not a coolplane node domain (fail closed)".to_string());
            }
            Some(h) if h.stale => {
                failed.insert(
                    n,
                    format!("telemetry of `{}` is stale (fail closed)", h.limiting_domain),
                );
            }
            Some(h) if h.free_gpus < gpus => {
                failed.insert(n, format!("{} GPUs free under leases, {gpus} asked", h.free_gpus));
            }
            Some(h) => {
                // The pod's GPUs above the floor must fit in the node's headroom (IT watts).
                let need = gpus as f64 * (w - b.ledger.floor_w()) * node_factor(&b, &n);
                if h.headroom_w >= need {
                    ok.push(n);
                } else {
                    failed.insert(
                        n,
                        format!(
                            "`{}` leaves {:.0} W, {gpus} GPUs at {w} W need more",
                            h.limiting_domain, h.headroom_w
                        ),
                    );
                }
            }
        }
    }
    let nodes = if by_name {
        None
    } else {
        args.nodes.as_ref().map(|list| {
            let mut list = list.clone();
            if let Some(items) = list.get_mut("items").and_then(|i| i.as_array_mut()) {
                items.retain(|i| {
                    i.pointer("/metadata/name")
                        .and_then(|n| n.as_str())
                        .is_some_and(|n| ok.iter().any(|o| o == n))
                });
            }
            list
        })
    };
    Ok(Json(ExtenderFilterResult {
        nodes,
        node_names: by_name.then_some(ok),
        failed_nodes: failed,
        failed_and_unresolvable_nodes: unresolvable,
        error,
    }))
}

fn node_factor(b: &super::Budget, node: &str) -> f64 {
    // IT watts per GPU watt on this node: (1 + node overhead), from the ledger's accounting.
    let id = b.ledger.domain_id(node).expect("a node");
    let d = &b.ledger.domains()[id];
    let full = d.breaker_w.unwrap_or(0.0);
    let base = d.baseline_w();
    let span = (b.ledger.tdp_w() - b.ledger.floor_w()) * d.gpus as f64;
    if span > 0.0 && full > base {
        (full - base) / span
    } else {
        1.0
    }
}

/// Prioritize: score the nodes 0–10 by power and cooling headroom (0 when stale or unknown).
#[utoipa::path(post, path = "/k8s/prioritize", tag = "kubernetes", security(("bearer" = [])),
    request_body = ExtenderArgs,
    responses((status = 200, body = Vec<HostPriority>),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 415, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json")))]
pub(super) async fn prioritize(
    State(st): State<ApiState>,
    caller: Caller,
    Body(args): Body<ExtenderArgs>,
) -> Result<Json<Vec<HostPriority>>, ApiError> {
    caller.need(Role::Scheduler)?;
    check_args(&args)?;
    let (names, _) = candidates(&args);
    let b = st.lock();
    Ok(Json(
        names
            .into_iter()
            .map(|n| {
                let score = node_headroom_by_name(&b, &n).map(|h| h.score as i64).unwrap_or(0);
                HostPriority { host: n, score }
            })
            .collect(),
    ))
}
