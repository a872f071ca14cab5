//! The simulated scheduler's power leases: a [`PowerGate`] backed by the controller's budget
//! ledger, the same ledger the daemon's HTTP API serves.
//!
//! Each step the gate feeds the ledger from the plant's measurements (staleness, the site budget
//! the meter reports, the cooling limit of each CDU, the overhead at the meter), which enforces
//! every limit; then the scheduler asks it before each start (a lease per job: minimum, request,
//! the job's priority), tells it of each end, and stops the jobs whose lease was preempted once
//! their grace period is over. The gate turns the grants into per-GPU power limits for the plant
//! (the lower of the ledger's and the controller's wins) and checks the ledger's invariant from
//! scratch every step.

use crate::spec::BudgetSpec;
use coolplane_controller::budget::{merge_limits, BudgetConfig, BudgetFeed, ProcessImageCooling, Unleased};
use coolplane_controller::ledger::{LeaseId, LeaseRequest, LeaseState, Ledger, LedgerConfig, LedgerEvent, NodeShare};
use coolplane_core::signals::{Actions, Measurements};
use coolplane_core::site::Site;
use coolplane_core::topology::Topology;
use coolplane_sim_plant::cluster::PowerGate;
use coolplane_sim_plant::workload::JobSpec;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// What the leases did over a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct BudgetReport {
    /// Leases granted (job starts).
    pub leases_granted: u64,
    /// Starts refused for want of power or cooling (a job may be refused many times).
    pub starts_refused: u64,
    /// Leases granted below their request.
    pub leases_degraded: u64,
    /// Grant reductions after a limit dropped.
    pub cap_reductions: u64,
    /// Leases preempted (caps to the floor, grace period, then the job stops and is requeued).
    pub preemptions: u64,
    /// Work thrown away by preempted jobs restarting, GPU-h.
    pub preempted_work_lost_gpu_h: f64,
    /// Steps at which the ledger's invariant (granted + unmanaged ≤ limit) failed the check.
    pub invariant_violations: u64,
    /// Peak number of live leases.
    pub leases_peak: usize,
}

struct Held {
    lease: LeaseId,
    gpus: Vec<u32>,
    start_s: f64,
}

/// The ledger as the simulated scheduler's power gate.
pub struct LedgerGate {
    spec: BudgetSpec,
    ledger: Ledger,
    feed: BudgetFeed,
    cooling: ProcessImageCooling,
    topo: Topology,
    gpu_node: Vec<usize>,
    held: HashMap<usize, Held>,
    by_lease: HashMap<LeaseId, usize>,
    preempted: Vec<usize>,
    ctl_last: Vec<Vec<f32>>,
    sent: Vec<Vec<f32>>,
    report: BudgetReport,
    now_s: f64,
    announced: Vec<(f64, f64, f64, bool)>,
}

impl LedgerGate {
    /// For a site.
    pub fn new(site: &Site, spec: BudgetSpec) -> Self {
        let topo = Topology::new(site);
        let ledger = Ledger::new(
            site,
            &topo,
            LedgerConfig {
                grace_s: spec.grace_s,
                ..LedgerConfig::default()
            },
        );
        let feed = BudgetFeed::new(
            site,
            &topo,
            BudgetConfig {
                site_margin_frac: spec.site_margin_frac,
                unleased: Unleased::Floor,
                ..BudgetConfig::default()
            },
        );
        let mut gpu_node = vec![0; topo.gpu_count];
        let mut node = 0;
        for r in &topo.racks {
            let spec = topo.hall_spec(site, r.hall);
            let gpn = spec.rack.gpus_per_node as usize;
            for n in 0..spec.rack.nodes_per_rack as usize {
                let id = ledger.node_domain(node).expect("node exists");
                gpu_node[r.gpus.start + n * gpn..r.gpus.start + (n + 1) * gpn].fill(id);
                node += 1;
            }
        }
        Self {
            spec,
            cooling: ProcessImageCooling::new(site, &topo),
            ctl_last: topo.racks.iter().map(|_| Vec::new()).collect(),
            sent: topo.racks.iter().map(|_| Vec::new()).collect(),
            ledger,
            feed,
            topo,
            gpu_node,
            held: HashMap::new(),
            by_lease: HashMap::new(),
            preempted: Vec::new(),
            report: BudgetReport::default(),
            now_s: 0.0,
            announced: Vec::new(),
        }
    }

    /// The scenario's budget cuts, which the grid announces `spec.notice_s` before they start
    /// (demand response with notice): the gate installs each as a site limit override from the
    /// notice until the cut's end. With no notice nothing is announced.
    pub fn with_announced(mut self, events: &[coolplane_sim_plant::faults::ScheduledFault]) -> Self {
        if self.spec.notice_s > 0.0 {
            for e in events {
                if let coolplane_sim_plant::faults::FaultKind::BudgetCut { budget_kw } = e.fault {
                    let end = e.end_s.unwrap_or(f64::INFINITY);
                    self.announced
                        .push((e.start_s - self.spec.notice_s, end, budget_kw * 1e3, false));
                }
            }
        }
        self
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Counters so far.
    pub fn report(&self) -> BudgetReport {
        BudgetReport {
            cap_reductions: self.ledger.cap_reductions(),
            ..self.report
        }
    }

    /// Start of a step: renew the running jobs' leases (their heartbeat), feed the ledger from
    /// the plant's measurements (it enforces every limit), collect the preempted jobs.
    pub fn begin_step(&mut self, t_s: f64, image: &Measurements) {
        self.now_s = t_s;
        for a in &mut self.announced {
            if !a.3 && a.0 <= t_s && t_s < a.1 {
                a.3 = true;
                let o = coolplane_controller::ledger::LimitOverride {
                    watts: a.2,
                    expires_s: a.1.min(1e15),
                    reason: "demand-response budget cut, announced".into(),
                };
                let _ = self.ledger.set_override(0, Some(o), t_s);
            }
        }
        for h in self.held.values() {
            let _ = self.ledger.renew(h.lease, None, t_s);
        }
        let leased = self.feed.leased_gpus(&self.ledger);
        self.feed.feed(&mut self.ledger, image, &self.cooling, &leased, t_s);
        self.absorb_events(t_s);
        if let Err(e) = self.ledger.check_invariant() {
            self.report.invariant_violations += 1;
            if self.report.invariant_violations == 1 {
                eprintln!("coolplane: budget ledger invariant failed at t = {t_s} s: {e}");
            }
        }
        self.report.leases_peak = self.report.leases_peak.max(self.ledger.lease_count());
    }

    fn absorb_events(&mut self, t_s: f64) {
        for e in self.ledger.drain_events() {
            match e {
                LedgerEvent::Preempting { .. } => self.report.preemptions += 1,
                LedgerEvent::Ended {
                    lease,
                    state: LeaseState::Preempted | LeaseState::Expired,
                    ..
                } => {
                    if let Some(job) = self.by_lease.remove(&lease) {
                        if let Some(h) = self.held.remove(&job) {
                            self.report.preempted_work_lost_gpu_h += h.gpus.len() as f64 * (t_s - h.start_s) / 3600.0;
                        }
                        self.preempted.push(job);
                    }
                }
                _ => {}
            }
        }
    }

    /// End of the scheduler's pass: write the grants into the actions as per-GPU power limits
    /// (each job's GPUs at its grant, idle GPUs at the floor), merged with the controller's limits.
    pub fn apply(&mut self, actions: &mut Actions) {
        let floor = self.ledger.floor_w() as f32;
        let mut caps = vec![floor; self.topo.gpu_count];
        for h in self.held.values() {
            if let Some(l) = self.ledger.lease(h.lease) {
                for &g in &h.gpus {
                    caps[g as usize] = l.granted_w as f32;
                }
            }
        }
        let mut changed = Vec::new();
        for (r, rack) in self.topo.racks.iter().enumerate() {
            let new = &caps[rack.gpus.clone()];
            if self.sent[r] != new {
                self.sent[r] = new.to_vec();
                changed.push(coolplane_core::signals::RackPowerLimits {
                    rack: r as u32,
                    limits_w: new.to_vec(),
                });
            }
        }
        let ctl = std::mem::take(&mut actions.power_limits);
        actions.power_limits = merge_limits(&ctl, &caps, &self.topo, &mut self.ctl_last, &changed);
    }
}

impl PowerGate for LedgerGate {
    fn admit(&mut self, t_s: f64, job: usize, spec: &JobSpec, gpus: &[u32]) -> bool {
        let mut per_node: BTreeMap<usize, u32> = BTreeMap::new();
        for &g in gpus {
            *per_node.entry(self.gpu_node[g as usize]).or_default() += 1;
        }
        let tdp = self.ledger.tdp_w();
        let floor = self.ledger.floor_w();
        let min_w = (self.spec.min_frac * tdp).clamp(floor, tdp);
        let request_w = (self.spec.request_frac * tdp).clamp(min_w, tdp);
        let req = LeaseRequest {
            external_id: format!("job-{}", spec.id),
            nodes: per_node
                .into_iter()
                .map(|(node, gpus)| NodeShare { node, gpus })
                .collect(),
            min_w,
            request_w,
            max_w: tdp,
            priority: spec.priority as i32,
            preemptible: true,
            ttl_s: self.spec.ttl_s,
        };
        match self.ledger.create(req, t_s) {
            Ok(id) => {
                self.report.leases_granted += 1;
                if self.ledger.lease(id).is_some_and(|l| l.degraded()) {
                    self.report.leases_degraded += 1;
                }
                self.held.insert(
                    job,
                    Held {
                        lease: id,
                        gpus: gpus.to_vec(),
                        start_s: t_s,
                    },
                );
                self.by_lease.insert(id, job);
                true
            }
            Err(_) => {
                self.report.starts_refused += 1;
                false
            }
        }
    }

    fn release(&mut self, t_s: f64, job: usize) {
        if let Some(h) = self.held.remove(&job) {
            self.by_lease.remove(&h.lease);
            let _ = self.ledger.release(h.lease, t_s);
            self.ledger.drain_events();
        }
    }

    fn take_preempted(&mut self, _t_s: f64) -> Vec<usize> {
        std::mem::take(&mut self.preempted)
    }
}
