//! The power-budget ledger: power domains (site, hall, CDU, rack, node), their limits with the
//! source of each, leases held by job schedulers, the unmanaged load, and the headroom left.
//!
//! Pure code: time is an argument (`now_s`, plant seconds), there is no IO and no randomness. The
//! HTTP service of the daemon and the simulated cluster scheduler of the scenario harness call the
//! same ledger.
//!
//! Accounting, in watts at rack input (IT watts):
//! * every GPU is always accounted at least at its floor, the device's minimum power cap (an
//!   unleased GPU is capped there), with the node overhead factor, plus every node's base power
//!   and every rack's switch power: the domain's *baseline*;
//! * a lease granted `g` W per GPU adds `(g − floor) × (1 + node_overhead_frac)` per GPU;
//! * the *unmanaged* load of a domain (cooling and losses at the site meter, misc loads, a forecast
//!   margin) is an input.
//!
//! Invariant (checked by [`Ledger::check_invariant`] and property-tested): for every domain,
//! `baseline + unmanaged + granted ≤ limit`, unless every lease under that domain is already at
//! its floor (nothing left to shed). When a limit drops, [`Ledger::enforce`] first takes back
//! growth (grants above the request), then shrinks grants toward their minimum, lowest priority
//! first and, within a priority, the highest grants first to a common level (the least work
//! lost on a concave performance-vs-power curve), then preempts (grant to the floor at once, the job gets a grace period to checkpoint
//! before the lease ends), and reports every affected lease as an event.
//!
//! Growth: a lease asks for `min ≤ request ≤ max` W per GPU. It is granted up to its request when
//! created; at every [`Ledger::tick`] headroom left over is lent to live leases up to their `max`,
//! highest priority first. Growth is lent, not promised: a new lease, a raised request or a lease
//! growing back to its request takes it back (lowest priority first), and a limit drop sheds it
//! before anyone's request is cut.
//!
//! Fail closed: a domain whose telemetry is stale grants nothing new on any path through it
//! (feasibility answers "not feasible", creation and growth are refused); existing grants are
//! kept (never raised) until the limit says otherwise.

use coolplane_core::site::Site;
use coolplane_core::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use thiserror::Error;

/// Index of a domain in the ledger.
pub type DomainId = usize;
/// Identifier of a lease (never reused within a ledger).
pub type LeaseId = u64;

/// Most events kept before the oldest are dropped (counted in [`Ledger::events_dropped`]).
pub const EVENTS_MAX: usize = 10_000;
/// Ended leases kept for look-up after their end.
pub const ENDED_MAX: usize = 4_096;
/// Grants are rounded down to this step, W per GPU (keeps float sums strictly on the safe side).
const GRANT_STEP_W: f64 = 0.001;
/// Tolerance of the invariant check, W (float sums over thousands of leases).
const SLACK_W: f64 = 1e-3;
/// Growth above the request is granted in steps of at least this many W per GPU (or straight to
/// `max`), so that a measured load that moves a little each tick does not re-send every cap.
pub const GROW_MIN_STEP_W: f64 = 1.0;

/// Level of a power domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum DomainKind {
    /// The whole site (utility meter).
    Site,
    /// A hall.
    Hall,
    /// A CDU and the row of racks on its secondary loop.
    Cdu,
    /// A rack (PDU).
    Rack,
    /// A node.
    Node,
}

/// Where a limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum LimitSource {
    /// Utility contract or grid (demand-response) limit.
    Contract,
    /// Electrical protection or nameplate (breaker, UPS, PDU).
    Breaker,
    /// Cooling capacity of the domain's cooling path.
    Cooling,
    /// Operator override with an expiry.
    Override,
}

/// An operator (or grid) override of a domain's limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitOverride {
    /// The limit, W.
    pub watts: f64,
    /// Plant time at which the override lapses, s.
    pub expires_s: f64,
    /// Why (free text for the log).
    pub reason: String,
}

/// One power domain.
#[derive(Debug, Clone, PartialEq)]
pub struct Domain {
    /// Name (from the topology: `hall-a-cdu-03`, `hall-a-r017-n04`).
    pub name: String,
    /// Level.
    pub kind: DomainKind,
    /// Parent domain (`None` for the site).
    pub parent: Option<DomainId>,
    /// Contract limit, W.
    pub contract_w: Option<f64>,
    /// Breaker / nameplate limit, W.
    pub breaker_w: Option<f64>,
    /// Cooling-capacity limit, W of IT load.
    pub cooling_w: Option<f64>,
    /// Operator override.
    pub override_: Option<LimitOverride>,
    /// Unmanaged load (beyond the baseline), W.
    pub unmanaged_w: f64,
    /// Last observed power, W (for display).
    pub observed_w: Option<f64>,
    /// Telemetry on this domain is stale.
    pub stale: bool,
    /// GPUs under this domain.
    pub gpus: u32,
    /// GPUs of this domain held by live leases.
    pub leased_gpus: u32,
    baseline_w: f64,
    granted_w: f64,
    grown_w: f64,
}

impl Domain {
    /// The limit in force and its source (the least of all present limits).
    pub fn limit(&self) -> (f64, Option<LimitSource>) {
        let mut best = (f64::INFINITY, None);
        for (w, s) in [
            (self.contract_w, LimitSource::Contract),
            (self.breaker_w, LimitSource::Breaker),
            (self.cooling_w, LimitSource::Cooling),
            (self.override_.as_ref().map(|o| o.watts), LimitSource::Override),
        ] {
            if let Some(w) = w {
                if w < best.0 {
                    best = (w, Some(s));
                }
            }
        }
        best
    }
    /// Baseline (every GPU at its floor, node base and switch power), W.
    pub fn baseline_w(&self) -> f64 {
        self.baseline_w
    }
    /// Granted above the floor by leases, W.
    pub fn granted_w(&self) -> f64 {
        self.granted_w
    }
    /// Part of [`Domain::granted_w`] lent to leases above their request (growth), W: a new lease
    /// may take it back.
    pub fn grown_w(&self) -> f64 {
        self.grown_w
    }
    /// Accounted load: baseline + unmanaged + granted, W.
    pub fn load_w(&self) -> f64 {
        self.baseline_w + self.unmanaged_w + self.granted_w
    }
    /// Headroom under the limit, W (negative when over).
    pub fn headroom_w(&self) -> f64 {
        self.limit().0 - self.load_w()
    }
}

/// Configuration of the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LedgerConfig {
    /// Grace period between a preemption notice and the end of the lease, s.
    pub grace_s: f64,
    /// Longest lease time-to-live a scheduler may ask for, s.
    pub ttl_max_s: f64,
    /// Most active leases (requests beyond are refused).
    pub leases_max: usize,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            grace_s: 120.0,
            ttl_max_s: 7.0 * 86_400.0,
            leases_max: 100_000,
        }
    }
}

/// A share of a lease on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeShare {
    /// Node domain.
    pub node: DomainId,
    /// GPUs of the node the job uses.
    pub gpus: u32,
}

/// What a scheduler asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRequest {
    /// The scheduler's job id.
    pub external_id: String,
    /// Nodes and GPUs.
    pub nodes: Vec<NodeShare>,
    /// Least power per GPU the job accepts, W.
    pub min_w: f64,
    /// Power per GPU asked for, W.
    pub request_w: f64,
    /// Power per GPU the job may use at most (cap ceiling), W.
    pub max_w: f64,
    /// Higher is more important.
    pub priority: i32,
    /// The job may be preempted (with a grace period) when a limit drops.
    pub preemptible: bool,
    /// Lease lifetime without renewal, s.
    pub ttl_s: f64,
}

/// Life of a lease.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum LeaseState {
    /// Granted and in force.
    Active,
    /// Preempted: caps at the floor now, the lease ends at `until_s`.
    Preempting {
        /// End of the grace period, s.
        until_s: f64,
    },
    /// Released by the scheduler.
    Released,
    /// Not renewed in time.
    Expired,
    /// Ended after a preemption's grace period.
    Preempted,
}

impl LeaseState {
    /// Still holds power (active or in its grace period).
    pub fn is_live(&self) -> bool {
        matches!(self, LeaseState::Active | LeaseState::Preempting { .. })
    }
}

/// A lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    /// Identifier.
    pub id: LeaseId,
    /// What was asked.
    pub request: LeaseRequest,
    /// Power per GPU granted now (the GPU cap), W.
    pub granted_w: f64,
    /// State.
    pub state: LeaseState,
    /// Created at, s.
    pub created_s: f64,
    /// Expires at unless renewed, s.
    pub expires_s: f64,
    /// Ended at, s.
    pub ended_s: Option<f64>,
    #[serde(skip)]
    weights: Vec<(DomainId, f64)>,
}

impl Lease {
    /// Less than the request is granted.
    pub fn degraded(&self) -> bool {
        self.granted_w + GRANT_STEP_W < self.request.request_w
    }
    /// Granted above the request (lent headroom, at most `max_w − request_w`), W per GPU.
    pub fn growth_w(&self) -> f64 {
        (self.granted_w - self.request.request_w).max(0.0)
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum LedgerError {
    /// Input out of range or inconsistent (names the field).
    #[error("invalid `{field}`: {reason}")]
    Invalid {
        /// Offending field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// Not enough power or cooling on the path (names the limiting domain).
    #[error("not feasible: domain `{domain}` has {available_w:.0} W for {needed_w:.0} W ({reason})")]
    NotFeasible {
        /// Limiting domain.
        domain: String,
        /// Available there, W.
        available_w: f64,
        /// Needed there at the minimum, W.
        needed_w: f64,
        /// Limit source or staleness.
        reason: String,
    },
    /// No such lease (or already ended).
    #[error("no live lease {0}")]
    UnknownLease(LeaseId),
    /// Too many leases.
    #[error("lease table full ({0} leases)")]
    Full(usize),
    /// The GPUs asked for on a node are held by other leases.
    #[error("node `{node}` has {free} GPUs free, {asked} asked")]
    GpusTaken {
        /// Node name.
        node: String,
        /// Free GPUs there.
        free: u32,
        /// GPUs asked.
        asked: u32,
    },
}

/// Something the scheduler or the operator must know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum LedgerEvent {
    /// A domain's limit went down.
    BudgetReduced {
        /// When, s.
        t_s: f64,
        /// Domain name.
        domain: String,
        /// New limit, W.
        limit_w: f64,
        /// Its source.
        source: Option<LimitSource>,
    },
    /// A lease's grant was lowered (still at or above its minimum).
    CapReduced {
        /// When, s.
        t_s: f64,
        /// Lease.
        lease: LeaseId,
        /// Scheduler's job id.
        external_id: String,
        /// New grant per GPU, W.
        granted_w: f64,
        /// Domain that forced it.
        domain: String,
    },
    /// A lease was preempted: caps at the floor now, the lease ends at `until_s`.
    Preempting {
        /// When, s.
        t_s: f64,
        /// Lease.
        lease: LeaseId,
        /// Scheduler's job id.
        external_id: String,
        /// End of the grace period, s.
        until_s: f64,
        /// Domain that forced it.
        domain: String,
    },
    /// A lease ended (expired, preempted after its grace, released).
    Ended {
        /// When, s.
        t_s: f64,
        /// Lease.
        lease: LeaseId,
        /// Scheduler's job id.
        external_id: String,
        /// Final state.
        state: LeaseState,
    },
    /// A domain's telemetry went stale or came back.
    DomainStale {
        /// When, s.
        t_s: f64,
        /// Domain name.
        domain: String,
        /// Stale now.
        stale: bool,
    },
    /// The cooling path limits a domain below its electrical limit.
    CoolingLimited {
        /// When, s.
        t_s: f64,
        /// Domain name.
        domain: String,
        /// Cooling limit, W.
        limit_w: f64,
    },
    /// A domain is over its limit with every lease at its floor (nothing left to shed).
    LimitBelowFloor {
        /// When, s.
        t_s: f64,
        /// Domain name.
        domain: String,
        /// Limit, W.
        limit_w: f64,
        /// Accounted load, W.
        load_w: f64,
    },
}

/// Headroom of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeHeadroom {
    /// Node domain.
    pub node: DomainId,
    /// Power a new lease could get on this node, W (IT watts, least over its path).
    pub headroom_w: f64,
    /// Per GPU above the floor, W.
    pub headroom_w_per_gpu: f64,
    /// Domain that limits it.
    pub limiting: DomainId,
    /// 0 (no room, or stale) to 10 (the whole node at TDP fits).
    pub score: u8,
    /// Some domain on its path is stale.
    pub stale: bool,
    /// GPUs of the node no lease holds.
    pub free_gpus: u32,
}

/// The answer of a feasibility check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Feasibility {
    /// The minimum fits on every path.
    pub feasible: bool,
    /// Per GPU that would be granted, W (0 when not feasible).
    pub grant_w: f64,
    /// Less than the request.
    pub degraded: bool,
    /// Limiting domain, if any.
    pub limiting: Option<DomainId>,
    /// Why not, when not feasible.
    pub reason: Option<String>,
}

/// The budget ledger.
#[derive(Debug, Clone)]
pub struct Ledger {
    cfg: LedgerConfig,
    domains: Vec<Domain>,
    by_name: HashMap<String, DomainId>,
    node_path: Vec<[DomainId; 5]>,
    node0: DomainId,
    node_factor: Vec<f64>,
    node_full_w: Vec<f64>,
    floor_w: f64,
    tdp_w: f64,
    leases: BTreeMap<LeaseId, Lease>,
    ended: VecDeque<Lease>,
    next_id: LeaseId,
    events: VecDeque<LedgerEvent>,
    events_dropped: u64,
    preemptions: u64,
    cap_reductions: u64,
    /// Per domain: the limit last reported as below the floor, while that episode lasts (one
    /// event per episode, and again only if the limit drops further or the load grows).
    below_floor: Vec<Option<(f64, f64)>>,
}

fn floor_step(x: f64) -> f64 {
    (x / GRANT_STEP_W).floor() * GRANT_STEP_W
}

impl Ledger {
    /// A ledger for a validated site: one domain per site, hall, CDU, rack and node. Limits: the
    /// site's contract (`power_budget_kw`) at the site; each CDU's cooling capacity (divided by
    /// the heat-to-liquid fraction, as IT watts); each rack's and node's nameplate at TDP as
    /// its breaker.
    pub fn new(site: &Site, topo: &Topology, cfg: LedgerConfig) -> Self {
        let floor_w = site.gpu.min_cap_w;
        let tdp_w = site.gpu.tdp_w;
        let mut domains = Vec::new();
        let mk = |name: String, kind, parent| Domain {
            name,
            kind,
            parent,
            contract_w: None,
            breaker_w: None,
            cooling_w: None,
            override_: None,
            unmanaged_w: 0.0,
            observed_w: None,
            stale: false,
            gpus: 0,
            leased_gpus: 0,
            baseline_w: 0.0,
            granted_w: 0.0,
            grown_w: 0.0,
        };
        let mut s = mk(site.site.name.clone(), DomainKind::Site, None);
        s.contract_w = Some(site.site.power_budget_kw * 1e3);
        domains.push(s);
        let hall0 = domains.len();
        for h in &topo.halls {
            domains.push(mk(h.name.clone(), DomainKind::Hall, Some(0)));
        }
        let cdu0 = domains.len();
        for c in &topo.cdus {
            let spec = topo.hall_spec(site, c.hall);
            let mut d = mk(c.name.clone(), DomainKind::Cdu, Some(hall0 + c.hall));
            d.cooling_w = Some(spec.cdu.capacity_kw * 1e3 / spec.rack.heat_to_liquid.max(0.01));
            domains.push(d);
        }
        let rack0 = domains.len();
        for r in &topo.racks {
            domains.push(mk(r.name.clone(), DomainKind::Rack, Some(cdu0 + r.cdu)));
        }
        let node0 = domains.len();
        let mut node_path = Vec::new();
        let mut node_factor = Vec::new();
        let mut node_full_w = Vec::new();
        for (ri, r) in topo.racks.iter().enumerate() {
            let spec = topo.hall_spec(site, r.hall);
            let gpn = spec.rack.gpus_per_node;
            let factor = 1.0 + spec.rack.node_overhead_frac;
            let nodes = spec.rack.nodes_per_rack;
            let full = spec.rack.node_base_w + gpn as f64 * tdp_w * factor;
            let base = spec.rack.node_base_w + gpn as f64 * floor_w * factor;
            for n in 0..nodes {
                let id = domains.len();
                let mut d = mk(format!("{}-n{:02}", r.name, n + 1), DomainKind::Node, Some(rack0 + ri));
                d.breaker_w = Some(full);
                d.gpus = gpn;
                d.baseline_w = base;
                domains.push(d);
                node_path.push([0, hall0 + r.hall, cdu0 + r.cdu, rack0 + ri, id]);
                node_factor.push(factor);
                node_full_w.push(full);
            }
            let rd = &mut domains[rack0 + ri];
            rd.breaker_w = Some(nodes as f64 * full + spec.rack.switch_w);
            rd.baseline_w = spec.rack.switch_w;
        }
        // Roll up GPUs and baselines from nodes and racks.
        for id in (1..domains.len()).rev() {
            let (g, b) = (domains[id].gpus, domains[id].baseline_w);
            let p = domains[id].parent.expect("non-site domains have a parent");
            domains[p].gpus += g;
            domains[p].baseline_w += b;
        }
        let by_name = domains.iter().enumerate().map(|(i, d)| (d.name.clone(), i)).collect();
        let n_domains = domains.len();
        Self {
            cfg,
            domains,
            by_name,
            node_path,
            node0,
            node_factor,
            node_full_w,
            floor_w,
            tdp_w,
            leases: BTreeMap::new(),
            ended: VecDeque::new(),
            next_id: 1,
            events: VecDeque::new(),
            events_dropped: 0,
            preemptions: 0,
            cap_reductions: 0,
            below_floor: vec![None; n_domains],
        }
    }

    /// Configuration.
    pub fn config(&self) -> &LedgerConfig {
        &self.cfg
    }
    /// All domains (index = [`DomainId`]).
    pub fn domains(&self) -> &[Domain] {
        &self.domains
    }
    /// A domain by name.
    pub fn domain_id(&self, name: &str) -> Option<DomainId> {
        self.by_name.get(name).copied()
    }
    /// Node domains are `node_domain(0)..` in rack order, `nodes_per_rack` per rack.
    pub fn node_domain(&self, node: usize) -> Option<DomainId> {
        (node < self.node_path.len()).then_some(self.node0 + node)
    }
    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.node_path.len()
    }
    /// The GPU floor (device minimum cap, the cap of an unleased GPU), W.
    pub fn floor_w(&self) -> f64 {
        self.floor_w
    }
    /// GPU TDP, W.
    pub fn tdp_w(&self) -> f64 {
        self.tdp_w
    }
    /// Path of a node domain: site, hall, CDU, rack, node.
    pub fn path(&self, node: DomainId) -> Option<[DomainId; 5]> {
        node.checked_sub(self.node0)
            .and_then(|i| self.node_path.get(i))
            .copied()
    }
    /// Live leases.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.leases.values()
    }
    /// Number of live leases.
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }
    /// A lease, live or recently ended.
    pub fn lease(&self, id: LeaseId) -> Option<&Lease> {
        self.leases.get(&id).or_else(|| self.ended.iter().find(|l| l.id == id))
    }
    /// Leases (live first, then recently ended) of a scheduler job id.
    pub fn leases_by_external_id<'a>(&'a self, external_id: &'a str) -> impl Iterator<Item = &'a Lease> + 'a {
        self.leases
            .values()
            .chain(self.ended.iter())
            .filter(move |l| l.request.external_id == external_id)
    }
    /// What a live lease adds to domain `d` above the baseline, W.
    pub fn contribution_w(&self, l: &Lease, d: DomainId) -> f64 {
        l.weights
            .iter()
            .find(|x| x.0 == d)
            .map(|x| x.1 * (l.granted_w - self.floor_w))
            .unwrap_or(0.0)
    }

    /// Take the events since the last call.
    pub fn drain_events(&mut self) -> Vec<LedgerEvent> {
        self.events.drain(..).collect()
    }
    /// Events dropped because the queue was full.
    pub fn events_dropped(&self) -> u64 {
        self.events_dropped
    }
    /// Preemptions so far.
    pub fn preemptions(&self) -> u64 {
        self.preemptions
    }
    /// Grant reductions so far.
    pub fn cap_reductions(&self) -> u64 {
        self.cap_reductions
    }

    fn push(&mut self, e: LedgerEvent) {
        if self.events.len() >= EVENTS_MAX {
            self.events.pop_front();
            self.events_dropped += 1;
        }
        self.events.push_back(e);
    }

    fn check_domain(&self, d: DomainId, field: &'static str) -> Result<(), LedgerError> {
        if d < self.domains.len() {
            Ok(())
        } else {
            Err(LedgerError::Invalid {
                field,
                reason: format!("no domain {d}"),
            })
        }
    }

    // ---- inputs -------------------------------------------------------------------------

    /// Set a domain's contract limit (W; `None` removes it).
    pub fn set_contract(&mut self, d: DomainId, watts: Option<f64>, now_s: f64) -> Result<(), LedgerError> {
        self.check_domain(d, "domain")?;
        check_watts_opt(watts, "contract_w")?;
        let old = self.domains[d].limit().0;
        self.domains[d].contract_w = watts;
        self.after_limit_change(d, old, now_s);
        Ok(())
    }

    /// Set a domain's cooling limit (W of IT load; `None` removes it).
    pub fn set_cooling(&mut self, d: DomainId, watts: Option<f64>, now_s: f64) -> Result<(), LedgerError> {
        self.check_domain(d, "domain")?;
        check_watts_opt(watts, "cooling_w")?;
        let old = self.domains[d].limit().0;
        let was_limited = self.domains[d].limit().1 == Some(LimitSource::Cooling);
        self.domains[d].cooling_w = watts;
        let (l, src) = self.domains[d].limit();
        if src == Some(LimitSource::Cooling) && !was_limited {
            let name = self.domains[d].name.clone();
            self.push(LedgerEvent::CoolingLimited {
                t_s: now_s,
                domain: name,
                limit_w: l,
            });
        }
        self.after_limit_change(d, old, now_s);
        Ok(())
    }

    /// Set or clear an operator override of a domain's limit.
    pub fn set_override(&mut self, d: DomainId, o: Option<LimitOverride>, now_s: f64) -> Result<(), LedgerError> {
        self.check_domain(d, "domain")?;
        if let Some(o) = &o {
            check_watts_opt(Some(o.watts), "watts")?;
            if !o.expires_s.is_finite() || o.expires_s <= now_s {
                return Err(LedgerError::Invalid {
                    field: "expires_at",
                    reason: "must be in the future".into(),
                });
            }
        }
        let old = self.domains[d].limit().0;
        self.domains[d].override_ = o;
        self.after_limit_change(d, old, now_s);
        Ok(())
    }

    /// Set the unmanaged load of a domain, W (beyond its baseline).
    pub fn set_unmanaged(&mut self, d: DomainId, watts: f64, now_s: f64) -> Result<(), LedgerError> {
        self.check_domain(d, "domain")?;
        if !watts.is_finite() || watts < 0.0 {
            return Err(LedgerError::Invalid {
                field: "unmanaged_w",
                reason: format!("{watts} is not a finite, non-negative power"),
            });
        }
        let old = self.domains[d].unmanaged_w;
        self.domains[d].unmanaged_w = watts;
        if watts > old {
            self.enforce(now_s);
        }
        Ok(())
    }

    /// Record an observed power for display, W.
    pub fn set_observed(&mut self, d: DomainId, watts: Option<f64>) {
        if let Some(x) = self.domains.get_mut(d) {
            x.observed_w = watts.filter(|w| w.is_finite());
        }
    }

    /// Mark a domain's telemetry stale or fresh.
    pub fn set_stale(&mut self, d: DomainId, stale: bool, now_s: f64) -> Result<(), LedgerError> {
        self.check_domain(d, "domain")?;
        if self.domains[d].stale != stale {
            self.domains[d].stale = stale;
            let name = self.domains[d].name.clone();
            self.push(LedgerEvent::DomainStale {
                t_s: now_s,
                domain: name,
                stale,
            });
        }
        Ok(())
    }

    fn after_limit_change(&mut self, d: DomainId, old_limit: f64, now_s: f64) {
        let (l, src) = self.domains[d].limit();
        if l < old_limit {
            let name = self.domains[d].name.clone();
            self.push(LedgerEvent::BudgetReduced {
                t_s: now_s,
                domain: name,
                limit_w: l,
                source: src,
            });
            self.enforce(now_s);
        }
    }

    // ---- queries ------------------------------------------------------------------------

    /// Headroom of a node for a new lease.
    pub fn node_headroom(&self, node: DomainId) -> Option<NodeHeadroom> {
        let path = self.path(node)?;
        let i = node - self.node0;
        let mut best = (f64::INFINITY, node);
        let mut stale = false;
        // A lease on the node's free GPUs takes over their measured (unmanaged) draw.
        let freed = self.domains[node].unmanaged_w;
        for &d in &path {
            let dom = &self.domains[d];
            stale |= dom.stale;
            // Growth lent to other leases goes back to a new one.
            let h = dom.headroom_w() + freed + dom.grown_w;
            if h < best.0 {
                best = (h, d);
            }
        }
        let gpus = self.domains[node].gpus.max(1) as f64;
        let headroom_w = if stale { 0.0 } else { best.0.max(0.0) };
        let per_gpu = headroom_w / (gpus * self.node_factor[i]);
        let full_above_floor = self.node_full_w[i] - self.domains[node].baseline_w;
        let score = if stale || full_above_floor <= 0.0 {
            0
        } else {
            ((headroom_w / full_above_floor).clamp(0.0, 1.0) * 10.0).floor() as u8
        };
        Some(NodeHeadroom {
            node,
            headroom_w,
            headroom_w_per_gpu: per_gpu,
            limiting: best.1,
            score,
            stale,
            free_gpus: self.domains[node].gpus.saturating_sub(self.domains[node].leased_gpus),
        })
    }

    fn weights(&self, nodes: &[NodeShare]) -> Result<Vec<(DomainId, f64)>, LedgerError> {
        let mut w: BTreeMap<DomainId, f64> = BTreeMap::new();
        for s in nodes {
            let path = self.path(s.node).ok_or(LedgerError::Invalid {
                field: "nodes",
                reason: format!("{} is not a node", s.node),
            })?;
            let cap = self.domains[s.node].gpus;
            if s.gpus == 0 || s.gpus > cap {
                return Err(LedgerError::Invalid {
                    field: "nodes",
                    reason: format!("{} GPUs on node {} (it has {cap})", s.gpus, self.domains[s.node].name),
                });
            }
            let f = s.gpus as f64 * self.node_factor[s.node - self.node0];
            for d in path {
                *w.entry(d).or_default() += f;
            }
        }
        let node_gpus: BTreeMap<DomainId, u32> = nodes.iter().fold(BTreeMap::new(), |mut m, s| {
            *m.entry(s.node).or_default() += s.gpus;
            m
        });
        for (n, g) in node_gpus {
            if g > self.domains[n].gpus {
                return Err(LedgerError::Invalid {
                    field: "nodes",
                    reason: format!("node {} listed with {g} GPUs in all", self.domains[n].name),
                });
            }
        }
        Ok(w.into_iter().collect())
    }

    fn check_free(&self, nodes: &[NodeShare]) -> Result<(), LedgerError> {
        let mut per: BTreeMap<DomainId, u32> = BTreeMap::new();
        for s in nodes {
            *per.entry(s.node).or_default() += s.gpus;
        }
        for (n, asked) in per {
            let d = &self.domains[n];
            let free = d.gpus.saturating_sub(d.leased_gpus);
            if asked > free {
                return Err(LedgerError::GpusTaken {
                    node: d.name.clone(),
                    free,
                    asked,
                });
            }
        }
        Ok(())
    }

    fn count_gpus(&mut self, id: LeaseId, add: bool) {
        let Some(l) = self.leases.get(&id) else { return };
        for s in &l.request.nodes {
            let d = &mut self.domains[s.node];
            d.leased_gpus = if add {
                d.leased_gpus + s.gpus
            } else {
                d.leased_gpus.saturating_sub(s.gpus)
            };
        }
    }

    fn validate(&self, r: &LeaseRequest) -> Result<(), LedgerError> {
        let bad = |field, reason: String| Err(LedgerError::Invalid { field, reason });
        if r.nodes.is_empty() {
            return bad("nodes", "at least one node".into());
        }
        if r.external_id.is_empty() || r.external_id.len() > 256 {
            return bad("external_id", "1 to 256 characters".into());
        }
        for (f, v) in [("min_w", r.min_w), ("request_w", r.request_w), ("max_w", r.max_w)] {
            if !v.is_finite() || v < self.floor_w || v > self.tdp_w {
                return bad(
                    f,
                    format!("{v} W per GPU is outside [{}, {}]", self.floor_w, self.tdp_w),
                );
            }
        }
        if !(r.min_w <= r.request_w && r.request_w <= r.max_w) {
            return bad("request_w", "need min_w ≤ request_w ≤ max_w".into());
        }
        if !r.ttl_s.is_finite() || r.ttl_s <= 0.0 || r.ttl_s > self.cfg.ttl_max_s {
            return bad("ttl_s", format!("{} s is outside (0, {}]", r.ttl_s, self.cfg.ttl_max_s));
        }
        Ok(())
    }

    /// Most per-GPU power grantable with these weights, ignoring `exclude`'s own grant, and the
    /// domain that limits it; with `reclaim`, the growth lent to other leases counts as free
    /// (the caller then takes it back with [`Ledger::enforce`]). `Err` names a stale domain.
    fn grantable(
        &self,
        weights: &[(DomainId, f64)],
        exclude: Option<&Lease>,
        freed: &[(DomainId, f64)],
        reclaim: bool,
    ) -> Result<(f64, Option<DomainId>), DomainId> {
        let mut best = (f64::INFINITY, None);
        for &(d, w) in weights {
            let dom = &self.domains[d];
            if dom.stale {
                return Err(d);
            }
            let freed_w = freed.iter().find(|x| x.0 == d).map(|x| x.1).unwrap_or(0.0);
            let own_w = exclude.and_then(|l| l.weights.iter().find(|x| x.0 == d)).map(|x| x.1);
            let own = own_w
                .map(|w| w * (exclude.unwrap().granted_w - self.floor_w))
                .unwrap_or(0.0);
            let lent = if reclaim {
                dom.grown_w - own_w.map(|w| w * exclude.unwrap().growth_w()).unwrap_or(0.0)
            } else {
                0.0
            };
            let room = dom.limit().0 - dom.baseline_w - (dom.unmanaged_w - freed_w) - (dom.granted_w - own) + lent;
            let g = self.floor_w + room / w;
            if g < best.0 {
                best = (g, Some(d));
            }
        }
        Ok(best)
    }

    /// Unmanaged load that a lease on these GPUs takes over: the measured draw of the node's
    /// unleased GPUs (its unmanaged load, [`crate::budget::Unleased::Observe`]) in proportion to
    /// the GPUs leased, on the node and every domain above it.
    fn freed(&self, nodes: &[NodeShare]) -> Vec<(DomainId, f64)> {
        let mut out: BTreeMap<DomainId, f64> = BTreeMap::new();
        for s in nodes {
            let Some(path) = self.path(s.node) else { continue };
            let d = &self.domains[s.node];
            let free = d.gpus.saturating_sub(d.leased_gpus);
            if free == 0 {
                continue;
            }
            let f = d.unmanaged_w * (s.gpus.min(free) as f64 / free as f64);
            for p in path {
                *out.entry(p).or_default() += f;
            }
        }
        out.into_iter().collect()
    }

    /// Side-effect-free check of a request: would it be granted, how much, and what limits it.
    pub fn feasibility(&self, r: &LeaseRequest) -> Result<Feasibility, LedgerError> {
        self.validate(r)?;
        let w = self.weights(&r.nodes)?;
        self.check_free(&r.nodes)?;
        let freed = self.freed(&r.nodes);
        Ok(match self.grantable(&w, None, &freed, true) {
            Err(d) => Feasibility {
                feasible: false,
                grant_w: 0.0,
                degraded: false,
                limiting: Some(d),
                reason: Some(format!(
                    "telemetry of `{}` is stale (fail closed)",
                    self.domains[d].name
                )),
            },
            Ok((g, lim)) => {
                let grant = floor_step(g.min(r.request_w));
                if grant + 1e-9 < r.min_w {
                    let d = lim.unwrap_or(0);
                    let (_, src) = self.domains[d].limit();
                    Feasibility {
                        feasible: false,
                        grant_w: 0.0,
                        degraded: false,
                        limiting: lim,
                        reason: Some(format!(
                            "`{}` ({}) allows {:.1} W per GPU, the minimum is {:.1} W",
                            self.domains[d].name,
                            src.map(source_name).unwrap_or("no limit"),
                            g.max(0.0),
                            r.min_w
                        )),
                    }
                } else {
                    Feasibility {
                        feasible: true,
                        grant_w: grant,
                        degraded: grant + GRANT_STEP_W < r.request_w,
                        limiting: lim,
                        reason: None,
                    }
                }
            }
        })
    }

    // ---- leases -------------------------------------------------------------------------

    /// Create a lease: granted between its minimum and its request, or refused.
    pub fn create(&mut self, r: LeaseRequest, now_s: f64) -> Result<LeaseId, LedgerError> {
        if self.leases.len() >= self.cfg.leases_max {
            return Err(LedgerError::Full(self.leases.len()));
        }
        let f = self.feasibility(&r)?;
        if !f.feasible {
            return Err(self.not_feasible(&r, f));
        }
        let weights = self.weights(&r.nodes)?;
        for (d, f) in self.freed(&r.nodes) {
            let dom = &mut self.domains[d];
            dom.unmanaged_w = (dom.unmanaged_w - f).max(0.0);
        }
        let id = self.next_id;
        self.next_id += 1;
        let lease = Lease {
            id,
            expires_s: now_s + r.ttl_s,
            request: r,
            granted_w: self.floor_w,
            state: LeaseState::Active,
            created_s: now_s,
            ended_s: None,
            weights,
        };
        self.leases.insert(id, lease);
        self.count_gpus(id, true);
        self.set_grant(id, f.grant_w);
        // The grant may use growth lent to other leases: take it back.
        self.enforce(now_s);
        Ok(id)
    }

    fn not_feasible(&self, r: &LeaseRequest, f: Feasibility) -> LedgerError {
        let d = f.limiting.unwrap_or(0);
        let dom = &self.domains[d];
        let w = self
            .weights(&r.nodes)
            .ok()
            .and_then(|w| w.iter().find(|x| x.0 == d).map(|x| x.1))
            .unwrap_or(0.0);
        LedgerError::NotFeasible {
            domain: dom.name.clone(),
            available_w: if dom.stale { 0.0 } else { dom.headroom_w().max(0.0) },
            needed_w: w * (r.min_w - self.floor_w),
            reason: f.reason.unwrap_or_default(),
        }
    }

    fn set_grant(&mut self, id: LeaseId, g: f64) {
        let Some(l) = self.leases.get_mut(&id) else { return };
        let delta = g - l.granted_w;
        let grown_before = l.growth_w();
        l.granted_w = g;
        let grown_delta = l.growth_w() - grown_before;
        for &(d, w) in &l.weights {
            let dom = &mut self.domains[d];
            dom.granted_w += w * delta;
            if dom.granted_w < 0.0 && dom.granted_w > -SLACK_W {
                dom.granted_w = 0.0;
            }
            dom.grown_w += w * grown_delta;
            if dom.grown_w < 0.0 && dom.grown_w > -SLACK_W {
                dom.grown_w = 0.0;
            }
        }
    }

    /// Renew a lease: it now expires `ttl_s` (or its own TTL) after `now_s`.
    pub fn renew(&mut self, id: LeaseId, ttl_s: Option<f64>, now_s: f64) -> Result<&Lease, LedgerError> {
        let max = self.cfg.ttl_max_s;
        let l = self.leases.get_mut(&id).ok_or(LedgerError::UnknownLease(id))?;
        let ttl = ttl_s.unwrap_or(l.request.ttl_s);
        if !ttl.is_finite() || ttl <= 0.0 || ttl > max {
            return Err(LedgerError::Invalid {
                field: "ttl_s",
                reason: format!("{ttl} s is outside (0, {max}]"),
            });
        }
        if let LeaseState::Active = l.state {
            l.expires_s = now_s + ttl;
            l.request.ttl_s = ttl;
        }
        Ok(&self.leases[&id])
    }

    /// Change a live lease's power range or priority. Growth is granted only as far as the
    /// headroom allows (and never through a stale domain); shrinking always succeeds.
    pub fn update(
        &mut self,
        id: LeaseId,
        min_w: Option<f64>,
        request_w: Option<f64>,
        max_w: Option<f64>,
        priority: Option<i32>,
        now_s: f64,
    ) -> Result<&Lease, LedgerError> {
        let l = self.leases.get(&id).ok_or(LedgerError::UnknownLease(id))?;
        if !matches!(l.state, LeaseState::Active) {
            return Err(LedgerError::Invalid {
                field: "state",
                reason: "the lease is being preempted".into(),
            });
        }
        let mut r = l.request.clone();
        r.min_w = min_w.unwrap_or(r.min_w);
        r.request_w = request_w.unwrap_or(r.request_w);
        r.max_w = max_w.unwrap_or(r.max_w);
        r.priority = priority.unwrap_or(r.priority);
        self.validate(&r)?;
        let g = match self.grantable(&l.weights, Some(l), &[], true) {
            Ok((g, _)) => floor_step(g.min(r.request_w)),
            // Stale path: keep (never raise) the grant.
            Err(_) => l.granted_w.min(r.request_w),
        };
        let g = if g + 1e-9 < r.min_w {
            if l.granted_w.min(r.request_w) + 1e-9 >= r.min_w {
                l.granted_w.min(r.request_w)
            } else {
                let f = Feasibility {
                    feasible: false,
                    grant_w: 0.0,
                    degraded: false,
                    limiting: self.grantable(&l.weights, Some(l), &[], true).ok().and_then(|x| x.1),
                    reason: Some("not enough headroom for the new minimum".into()),
                };
                return Err(self.not_feasible(&r, f));
            }
        } else {
            g
        };
        // Growth is counted against the request in force: drop the grant, change the request,
        // grant again (growth lent to others that the new grant uses is taken back).
        let floor = self.floor_w;
        self.set_grant(id, floor);
        self.leases.get_mut(&id).expect("checked").request = r;
        self.set_grant(id, g);
        self.enforce(now_s);
        Ok(&self.leases[&id])
    }

    /// Release a lease (the caps of its GPUs revert to the floor).
    pub fn release(&mut self, id: LeaseId, now_s: f64) -> Result<Lease, LedgerError> {
        if !self.leases.contains_key(&id) {
            return Err(LedgerError::UnknownLease(id));
        }
        Ok(self.end(id, LeaseState::Released, now_s))
    }

    fn end(&mut self, id: LeaseId, state: LeaseState, now_s: f64) -> Lease {
        let floor = self.floor_w;
        self.set_grant(id, floor);
        self.count_gpus(id, false);
        let mut l = self.leases.remove(&id).expect("caller checked");
        l.state = state;
        l.ended_s = Some(now_s);
        self.push(LedgerEvent::Ended {
            t_s: now_s,
            lease: id,
            external_id: l.request.external_id.clone(),
            state,
        });
        if self.ended.len() >= ENDED_MAX {
            self.ended.pop_front();
        }
        self.ended.push_back(l.clone());
        l
    }

    /// Advance to `now_s`: lapse overrides, expire leases, end grace periods, enforce every
    /// limit, grow degraded leases back toward their request (highest priority first, taking
    /// back growth lent to others), then lend what headroom is left to leases below their `max`
    /// (highest priority first).
    pub fn tick(&mut self, now_s: f64) {
        for d in 0..self.domains.len() {
            if self.domains[d].override_.as_ref().is_some_and(|o| o.expires_s <= now_s) {
                self.domains[d].override_ = None;
            }
        }
        let due: Vec<(LeaseId, LeaseState)> = self
            .leases
            .values()
            .filter_map(|l| match l.state {
                LeaseState::Preempting { until_s } if until_s <= now_s => Some((l.id, LeaseState::Preempted)),
                _ if l.expires_s <= now_s => Some((l.id, LeaseState::Expired)),
                _ => None,
            })
            .collect();
        for (id, s) in due {
            self.end(id, s, now_s);
        }
        self.enforce(now_s);
        self.regrow(now_s);
        self.grow();
    }

    fn regrow(&mut self, now_s: f64) {
        let mut order: Vec<(i32, LeaseId)> = self
            .leases
            .values()
            .filter(|l| matches!(l.state, LeaseState::Active) && l.degraded())
            .map(|l| (-l.request.priority, l.id))
            .collect();
        order.sort();
        let mut any = false;
        for (_, id) in order {
            let l = &self.leases[&id];
            if let Ok((g, _)) = self.grantable(&l.weights, Some(l), &[], true) {
                let g = floor_step(g.min(l.request.request_w));
                if g > l.granted_w {
                    self.set_grant(id, g);
                    any = true;
                }
            }
        }
        if any {
            // Take back the growth the requests above used.
            self.enforce(now_s);
        }
    }

    /// Lend the headroom left to active leases below their `max`, highest priority first (then
    /// oldest), never through a stale domain, in steps of at least [`GROW_MIN_STEP_W`].
    fn grow(&mut self) {
        let mut order: Vec<(i32, LeaseId)> = self
            .leases
            .values()
            .filter(|l| {
                matches!(l.state, LeaseState::Active) && !l.degraded() && l.granted_w + GRANT_STEP_W < l.request.max_w
            })
            .map(|l| (-l.request.priority, l.id))
            .collect();
        order.sort();
        for (_, id) in order {
            let l = &self.leases[&id];
            if let Ok((g, _)) = self.grantable(&l.weights, Some(l), &[], false) {
                let g = floor_step(g.min(l.request.max_w));
                let to_max = g + GRANT_STEP_W >= l.request.max_w;
                if g >= l.granted_w + GROW_MIN_STEP_W || (to_max && g > l.granted_w) {
                    self.set_grant(id, g);
                }
            }
        }
    }

    /// Bring every domain within its limit: shrink grants toward their minimum (lowest priority
    /// first; within a priority, the highest grants first, to a common level), then preempt
    /// (preemptible leases first). Returns the number of
    /// leases affected.
    pub fn enforce(&mut self, now_s: f64) -> usize {
        let mut affected = 0;
        // Deepest first: a node or rack fixed first also relieves its ancestors.
        let mut over: Vec<DomainId> = (0..self.domains.len())
            .filter(|&d| self.domains[d].headroom_w() < -SLACK_W)
            .collect();
        // An episode below the floor ends once the domain is back within its limit.
        for d in 0..self.domains.len() {
            if self.domains[d].headroom_w() >= -SLACK_W {
                self.below_floor[d] = None;
            }
        }
        over.sort_by_key(|&d| std::cmp::Reverse(self.domains[d].kind));
        for d in over {
            affected += self.shed(d, now_s);
        }
        affected
    }

    fn shed(&mut self, d: DomainId, now_s: f64) -> usize {
        let mut excess = -self.domains[d].headroom_w();
        if excess <= SLACK_W {
            return 0;
        }
        let name = self.domains[d].name.clone();
        // Candidates: live leases on this domain, least important first.
        let mut cands: Vec<(i32, bool, std::cmp::Reverse<LeaseId>, LeaseId, f64)> = self
            .leases
            .values()
            .filter(|l| l.granted_w > self.floor_w)
            .filter_map(|l| l.weights.iter().find(|x| x.0 == d).map(|x| (l, x.1)))
            .map(|(l, w)| {
                (
                    l.request.priority,
                    !l.request.preemptible,
                    std::cmp::Reverse(l.id),
                    l.id,
                    w,
                )
            })
            .collect();
        cands.sort_by_key(|a| (a.0, a.2));
        let mut touched = Vec::new();
        // Pass 0: take back growth (grants above the request).
        for &(_, _, _, id, w) in &cands {
            if excess <= SLACK_W {
                break;
            }
            let l = &self.leases[&id];
            let can = l.growth_w() * w;
            if can <= 0.0 {
                continue;
            }
            let cut = can.min(excess);
            let g = floor_step(l.granted_w - cut / w - GRANT_STEP_W).max(l.request.request_w);
            excess -= (l.granted_w - g) * w;
            self.set_grant(id, g);
            touched.push(id);
        }
        // Pass 1: shrink toward the minimum, one priority class at a time (lowest first). Within
        // a class the highest grants come down first, to a common level: every GPU runs the
        // same performance-vs-power curve, concave (a watt buys less work the higher the power
        // already is), so levelling from the top loses the least work for the watts shed.
        let mut start = 0;
        while start < cands.len() && excess > SLACK_W {
            let prio = cands[start].0;
            let end = start + cands[start..].iter().take_while(|c| c.0 == prio).count();
            // (lease, weight, grant, min) of the class's leases that can still shrink.
            let class: Vec<(LeaseId, f64, f64, f64)> = cands[start..end]
                .iter()
                .map(|c| (c.3, c.4, self.leases[&c.3].granted_w, self.leases[&c.3].request.min_w))
                .filter(|&(_, w, g, min)| g > min && w > 0.0)
                .collect();
            start = end;
            if class.is_empty() {
                continue;
            }
            let shed_at = |level: f64| -> f64 {
                class
                    .iter()
                    .map(|&(_, w, g, min)| (g - level.max(min)).max(0.0) * w)
                    .sum()
            };
            let lowest = class.iter().map(|c| c.3).fold(f64::INFINITY, f64::min);
            let level = if shed_at(lowest) <= excess {
                lowest
            } else {
                // shed_at falls as the level rises: the highest level that sheds enough.
                let (mut lo, mut hi) = (lowest, class.iter().map(|c| c.2).fold(f64::NEG_INFINITY, f64::max));
                for _ in 0..64 {
                    let mid = 0.5 * (lo + hi);
                    if shed_at(mid) >= excess {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                lo
            };
            for &(id, w, g, min) in &class {
                if g <= level {
                    continue;
                }
                let new_g = floor_step(level - GRANT_STEP_W).max(min);
                if new_g >= g {
                    continue;
                }
                excess -= (g - new_g) * w;
                self.set_grant(id, new_g);
                if !touched.contains(&id) {
                    touched.push(id);
                }
            }
        }
        // Pass 2: preempt, preemptible first, least important first.
        let mut pre: Vec<_> = cands.clone();
        pre.sort_by_key(|a| (a.1, a.0, a.2));
        let mut preempted = Vec::new();
        for &(_, _, _, id, w) in &pre {
            if excess <= SLACK_W {
                break;
            }
            let l = &self.leases[&id];
            if l.granted_w <= self.floor_w {
                continue;
            }
            excess -= (l.granted_w - self.floor_w) * w;
            let floor = self.floor_w;
            self.set_grant(id, floor);
            preempted.push(id);
        }
        for &id in &touched {
            if preempted.contains(&id) {
                continue;
            }
            self.cap_reductions += 1;
            let l = &self.leases[&id];
            let e = LedgerEvent::CapReduced {
                t_s: now_s,
                lease: id,
                external_id: l.request.external_id.clone(),
                granted_w: l.granted_w,
                domain: name.clone(),
            };
            self.push(e);
        }
        for &id in &preempted {
            self.preemptions += 1;
            let until_s = now_s + self.cfg.grace_s;
            let l = self.leases.get_mut(&id).expect("live");
            if matches!(l.state, LeaseState::Active) {
                l.state = LeaseState::Preempting { until_s };
            }
            let e = LedgerEvent::Preempting {
                t_s: now_s,
                lease: id,
                external_id: l.request.external_id.clone(),
                until_s,
                domain: name.clone(),
            };
            self.push(e);
        }
        if excess > SLACK_W {
            let dom = &self.domains[d];
            let (limit_w, load_w) = (dom.limit().0, dom.load_w());
            // Said once per episode (enforce runs every tick); said again only when it gets
            // worse: the limit drops or the load grows by more than the slack.
            let worse = match self.below_floor[d] {
                None => true,
                Some((l, w)) => limit_w < l - SLACK_W || load_w > w + SLACK_W,
            };
            if worse {
                self.below_floor[d] = Some((limit_w, load_w));
                let e = LedgerEvent::LimitBelowFloor {
                    t_s: now_s,
                    domain: name,
                    limit_w,
                    load_w,
                };
                self.push(e);
            }
        }
        touched.len() + preempted.iter().filter(|p| !touched.contains(p)).count()
    }

    /// Check the invariant from scratch (independently of the running sums): every domain is
    /// within its limit, or every lease on it is at its floor. Also checks that the running
    /// sums equal a recomputation. Returns a description of the first violation.
    pub fn check_invariant(&self) -> Result<(), String> {
        let mut granted = vec![0.0f64; self.domains.len()];
        let mut grown = vec![0.0f64; self.domains.len()];
        let mut leased = vec![0u32; self.domains.len()];
        for l in self.leases.values() {
            for s in &l.request.nodes {
                leased[s.node] += s.gpus;
            }
            if l.granted_w + 1e-9 < self.floor_w || l.granted_w > l.request.max_w + 1e-9 {
                return Err(format!("lease {} granted {} outside [floor, max]", l.id, l.granted_w));
            }
            for s in &l.request.nodes {
                let w = s.gpus as f64 * self.node_factor[s.node - self.node0];
                for d in self.path(s.node).expect("validated") {
                    granted[d] += w * (l.granted_w - self.floor_w);
                    grown[d] += w * l.growth_w();
                }
            }
        }
        for (i, dom) in self.domains.iter().enumerate() {
            if leased[i] != dom.leased_gpus || (dom.kind == DomainKind::Node && leased[i] > dom.gpus) {
                return Err(format!(
                    "{}: {} GPUs leased, counted {}",
                    dom.name, leased[i], dom.leased_gpus
                ));
            }
            if (granted[i] - dom.granted_w).abs() > SLACK_W.max(1e-9 * granted[i].abs()) * 10.0 {
                return Err(format!(
                    "{}: running sum {} vs recomputed {}",
                    dom.name, dom.granted_w, granted[i]
                ));
            }
            if (grown[i] - dom.grown_w).abs() > SLACK_W.max(1e-9 * grown[i].abs()) * 10.0 {
                return Err(format!(
                    "{}: running growth sum {} vs recomputed {}",
                    dom.name, dom.grown_w, grown[i]
                ));
            }
            let load = dom.baseline_w + dom.unmanaged_w + granted[i];
            let limit = dom.limit().0;
            if load > limit + SLACK_W * 10.0 {
                let sheddable = self
                    .leases
                    .values()
                    .any(|l| l.granted_w > self.floor_w + 1e-9 && l.weights.iter().any(|x| x.0 == i));
                if sheddable {
                    return Err(format!("{}: load {load:.3} W over limit {limit:.3} W", dom.name));
                }
            }
        }
        Ok(())
    }
}

fn check_watts_opt(w: Option<f64>, field: &'static str) -> Result<(), LedgerError> {
    match w {
        Some(x) if !x.is_finite() || x < 0.0 => Err(LedgerError::Invalid {
            field,
            reason: format!("{x} is not a finite, non-negative power"),
        }),
        _ => Ok(()),
    }
}

/// Name of a limit source as the API spells it.
pub fn source_name(s: LimitSource) -> &'static str {
    match s {
        LimitSource::Contract => "contract",
        LimitSource::Breaker => "breaker",
        LimitSource::Cooling => "cooling",
        LimitSource::Override => "override",
    }
}

#[cfg(test)]
mod tests;
