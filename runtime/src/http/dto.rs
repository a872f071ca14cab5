//! The API's wire types (JSON). Watts everywhere, times as RFC 3339 UTC strings, domains and
//! nodes by name. Only this module and the handlers know them; the ledger has its own types.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};

/// An error (RFC 9457 problem details), served as `application/problem+json`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// URI of the problem type.
    #[serde(rename = "type")]
    pub type_: String,
    /// Short summary.
    pub title: String,
    /// HTTP status code.
    pub status: u16,
    /// What exactly was wrong (names the field, the domain, the limit).
    pub detail: String,
    /// Offending field, when one is to blame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Limiting domain, for "not feasible".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

/// A limit override in force.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OverrideOut {
    /// Limit, W.
    pub watts: f64,
    /// When it lapses (RFC 3339 UTC).
    pub expires_at: String,
    /// Why.
    pub reason: String,
}

/// Every limit of a domain, by source (absent: none of that kind).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Limits {
    /// Utility contract or grid limit, W.
    pub contract_w: Option<f64>,
    /// Breaker / nameplate, W.
    pub breaker_w: Option<f64>,
    /// Cooling capacity of the path, W of IT load.
    pub cooling_w: Option<f64>,
    /// Operator override.
    #[serde(rename = "override")]
    pub override_: Option<OverrideOut>,
}

/// A power domain: site, hall, CDU (a row on one cooling loop), rack or node.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DomainOut {
    /// Name (identifier in paths).
    pub name: String,
    /// `site`, `hall`, `cdu`, `rack` or `node`.
    pub kind: String,
    /// Parent domain.
    pub parent: Option<String>,
    /// Limit in force, W (the least of `limits`; null: none on this domain itself).
    pub limit_w: Option<f64>,
    /// Source of the limit in force: `contract`, `breaker`, `cooling`, `override`.
    pub limit_source: Option<String>,
    /// Every limit by source.
    pub limits: Limits,
    /// Baseline: every GPU at its floor, node base and switch power, W.
    pub baseline_w: f64,
    /// Unmanaged load (measured overhead, unleased draw, margin), W.
    pub unmanaged_w: f64,
    /// Granted to leases above the floor, W.
    pub granted_w: f64,
    /// Part of `granted_w` lent to leases above their request (growth toward their `max_w`), W:
    /// a new lease or a limit drop takes it back first.
    pub lent_w: f64,
    /// baseline + unmanaged + granted, W.
    pub load_w: f64,
    /// limit − load, W (null when the domain has no limit of its own).
    pub headroom_w: Option<f64>,
    /// Last observed power, W.
    pub observed_w: Option<f64>,
    /// Telemetry on this domain is stale: nothing new is granted through it.
    pub stale: bool,
    /// GPUs under the domain.
    pub gpus: u32,
    /// GPUs under the domain held by leases (nodes only; 0 elsewhere).
    pub leased_gpus: u32,
}

/// A page of domains.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DomainPage {
    /// Domains of this page.
    pub items: Vec<DomainOut>,
    /// Domains matching in all.
    pub total: usize,
}

/// Filter and paging of the domain list.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DomainQuery {
    /// Only this kind: `site`, `hall`, `cdu`, `rack`, `node`.
    pub kind: Option<String>,
    /// Only the children of this domain.
    pub parent: Option<String>,
    /// Page size (1–1000, default 100).
    pub limit: Option<usize>,
    /// Skip this many.
    pub offset: Option<usize>,
}

/// Operator (or grid) override of a domain's limit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrideIn {
    /// New limit, W (≥ 0).
    pub watts: f64,
    /// When it lapses (RFC 3339, in the future).
    pub expires_at: String,
    /// Why (for the log).
    #[serde(default)]
    pub reason: String,
}

/// GPUs of a job on one node.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeGpus {
    /// Node name (a `node` domain, e.g. `hall-a-r001-n01`).
    pub node: String,
    /// GPUs used on that node (default: all of them).
    #[serde(default)]
    pub gpus: Option<u32>,
}

/// A feasibility question: could this job get this power now?
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeasibilityIn {
    /// Nodes and GPUs (1–4096 entries).
    pub nodes: Vec<NodeGpus>,
    /// Least power per GPU the job accepts, W (default: the request).
    #[serde(default)]
    pub min_w: Option<f64>,
    /// Power per GPU asked for, W (default: TDP).
    #[serde(default)]
    pub request_w: Option<f64>,
}

/// Headroom of one node.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NodeHeadroomOut {
    /// Node name.
    pub node: String,
    /// Power a new lease could get there, W (least over its path; 0 when stale).
    pub headroom_w: f64,
    /// Per GPU that could be granted if the whole node were leased, W.
    pub grantable_w_per_gpu: f64,
    /// 0 (no room, or stale) to 10 (the whole node at TDP fits).
    pub score: u8,
    /// Domain that limits it.
    pub limiting_domain: String,
    /// Telemetry on its path is stale.
    pub stale: bool,
    /// GPUs no lease holds.
    pub free_gpus: u32,
}

/// The answer of a feasibility check (no side effect).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FeasibilityOut {
    /// The minimum fits on every path and the GPUs are free.
    pub feasible: bool,
    /// Per GPU that would be granted, W (0 when not feasible).
    pub grant_w: f64,
    /// Less than the request would be granted.
    pub degraded: bool,
    /// The domain that limits the grant.
    pub limiting_domain: Option<String>,
    /// Why not, when not feasible.
    pub reason: Option<String>,
    /// Per node.
    pub nodes: Vec<NodeHeadroomOut>,
}

/// A placement question.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlacementIn {
    /// GPUs the job needs (1–65536).
    pub gpus: u32,
    /// Expected power per GPU, W (default: TDP).
    #[serde(default)]
    pub w_per_gpu: Option<f64>,
    /// Expected duration, s (for information; the forecast will use it).
    #[serde(default)]
    pub duration_s: Option<f64>,
}

/// Placement advice.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlacementOut {
    /// A placement that fits was found.
    pub feasible: bool,
    /// Nodes and GPUs, most preferred first.
    pub nodes: Vec<NodeGpus>,
    /// CDU (cooling loop) chosen: the one with the most headroom that fits the whole job.
    pub cdu: Option<String>,
    /// Per GPU the placement would be granted, W.
    pub grant_w: f64,
    /// Why not, when not feasible.
    pub reason: Option<String>,
}

/// A lease request.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AllocationIn {
    /// The scheduler's job id.
    pub external_id: String,
    /// Nodes and GPUs (1–4096 entries).
    pub nodes: Vec<NodeGpus>,
    /// Least power per GPU the job accepts, W (default: the request: a strict grant).
    #[serde(default)]
    pub min_w: Option<f64>,
    /// Power per GPU asked for, W (default: TDP).
    #[serde(default)]
    pub request_w: Option<f64>,
    /// Most power per GPU the job may use, W (default: request_w, so no growth unless asked).
    #[serde(default)]
    pub max_w: Option<f64>,
    /// Higher is more important (default 0).
    #[serde(default)]
    pub priority: i32,
    /// May be preempted with a grace period when a limit drops (default true).
    #[serde(default = "yes")]
    pub preemptible: bool,
    /// Lifetime without renewal, s (default 300).
    #[serde(default = "ttl")]
    pub ttl_s: f64,
}

fn yes() -> bool {
    true
}
fn ttl() -> f64 {
    300.0
}

/// Caps applied for a lease on one node.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CapOut {
    /// Node.
    pub node: String,
    /// GPUs of the lease there.
    pub gpus: u32,
    /// Power limit per GPU commanded, W.
    pub cap_w: f64,
    /// Mean power limit the node's GPUs report in force, W (null: no telemetry yet).
    pub applied_w: Option<f64>,
    /// Mean power the node's GPUs draw, W.
    pub observed_w: Option<f64>,
    /// The reported limits equal the commanded ones (within 1 W).
    pub converged: bool,
}

/// A lease.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AllocationOut {
    /// Identifier.
    pub id: u64,
    /// The scheduler's job id.
    pub external_id: String,
    /// `active`, `preempting`, `released`, `expired`, `preempted`.
    pub state: String,
    /// Least power per GPU accepted, W.
    pub min_w: f64,
    /// Power per GPU asked, W.
    pub request_w: f64,
    /// Most power per GPU, W.
    pub max_w: f64,
    /// Power per GPU granted now (the GPU cap), W: between `min_w` and `request_w`, or above the
    /// request up to `max_w` when headroom is left over (growth, lent: taken back first when a
    /// limit drops or a new lease needs it).
    pub granted_w: f64,
    /// Granted above the request (`granted_w − request_w`, 0 when not above), W per GPU.
    pub growth_w: f64,
    /// Less than the request is granted.
    pub degraded: bool,
    /// Priority.
    pub priority: i32,
    /// Preemptible.
    pub preemptible: bool,
    /// Lifetime without renewal, s.
    pub ttl_s: f64,
    /// Created (RFC 3339 UTC).
    pub created_at: String,
    /// Expires unless renewed (RFC 3339 UTC).
    pub expires_at: String,
    /// End of the grace period, when preempting.
    pub grace_until: Option<String>,
    /// Ended (RFC 3339 UTC).
    pub ended_at: Option<String>,
    /// Caps per node and enforcement feedback.
    pub caps: Vec<CapOut>,
}

/// Allocations of a job.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AllocationList {
    /// Live ones first, then recently ended.
    pub items: Vec<AllocationOut>,
}

/// Look-up of allocations by the scheduler's job id.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AllocationQuery {
    /// The scheduler's job id.
    pub external_id: String,
}

/// Change of a live lease.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AllocationPatch {
    /// New minimum per GPU, W.
    #[serde(default)]
    pub min_w: Option<f64>,
    /// New request per GPU, W.
    #[serde(default)]
    pub request_w: Option<f64>,
    /// New maximum per GPU, W.
    #[serde(default)]
    pub max_w: Option<f64>,
    /// New priority.
    #[serde(default)]
    pub priority: Option<i32>,
}

/// Heartbeat.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewIn {
    /// New lifetime from now, s (default: the lease's own TTL).
    #[serde(default)]
    pub ttl_s: Option<f64>,
}

/// One point of the forecast.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ForecastPoint {
    /// Time (RFC 3339 UTC).
    pub at: String,
    /// Site limit then, W (overrides lapse at their expiry).
    pub limit_w: Option<f64>,
    /// Accounted site load then, W (leases not renewed drop out at their expiry).
    pub load_w: f64,
    /// limit − load, W.
    pub headroom_w: Option<f64>,
}

/// The site's load and headroom forecast.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ForecastOut {
    /// How it was made: `persistence+schedule` (unmanaged load held at its present value, the
    /// known schedule of lease expiries and override lapses applied) until the twin's forecaster
    /// takes over.
    pub method: String,
    /// Points, from now.
    pub points: Vec<ForecastPoint>,
}

/// Liveness / readiness.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok` or what is missing.
    pub status: String,
}

/// Kubernetes scheduler extender arguments (`k8s.io/kube-scheduler/extender/v1.ExtenderArgs`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExtenderArgs {
    /// The pod being scheduled (`v1.Pod`; coolplane reads its GPU limits and annotations).
    #[serde(rename = "Pod", default)]
    #[schema(value_type = Object)]
    pub pod: serde_json::Value,
    /// Candidate nodes (`v1.NodeList`), when the extender is not node-cache capable.
    #[serde(rename = "Nodes", default)]
    #[schema(value_type = Option<Object>)]
    pub nodes: Option<serde_json::Value>,
    /// Candidate node names, when the extender is node-cache capable.
    #[serde(rename = "NodeNames", default)]
    pub node_names: Option<Vec<String>>,
}

/// Kubernetes scheduler extender filter result (`ExtenderFilterResult`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExtenderFilterResult {
    /// Nodes that fit, as a `v1.NodeList` (when the request carried `Nodes`).
    #[serde(rename = "Nodes", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub nodes: Option<serde_json::Value>,
    /// Names of the nodes that fit (when the request carried `NodeNames`).
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<String>>,
    /// Nodes that do not fit now, with the reason (preemption may help).
    #[serde(rename = "FailedNodes")]
    pub failed_nodes: BTreeMap<String, String>,
    /// Nodes that can never fit (not a coolplane node), with the reason.
    #[serde(rename = "FailedAndUnresolvableNodes")]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// Error message (empty when none).
    #[serde(rename = "Error")]
    pub error: String,
}

/// One node's score (`HostPriority`), 0–10.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HostPriority {
    /// Node name.
    #[serde(rename = "Host")]
    pub host: String,
    /// 0–10.
    #[serde(rename = "Score")]
    pub score: i64,
}
