//! The cluster scheduler inside the simulation: it admits the workload's jobs, places them on
//! free GPUs (first fit over racks, in the order the placement advice gives, else by index),
//! finishes them, fails them when one of their GPUs shuts down, and sets the plant's per-job
//! utilisation every step.

use crate::plant::Plant;
use crate::workload::{JobSpec, WorkloadModel};
use coolplane_core::signals::PlacementAdvice;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
struct Running {
    job: usize,
    slot: u32,
    start_s: f64,
    gpus: Vec<u32>,
}

/// Counters of the scheduler.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Jobs started.
    pub started: u64,
    /// Jobs that ran to completion.
    pub completed: u64,
    /// Jobs failed by a GPU shutdown.
    pub failed: u64,
    /// Jobs waiting now.
    pub queued: usize,
    /// Jobs running now.
    pub running: usize,
    /// GPUs allocated now.
    pub busy_gpus: usize,
    /// Jobs stopped and requeued because their power lease was preempted.
    pub preempted: u64,
}

/// A power gate the scheduler asks before it starts a job: the power-budget ledger, in process.
pub trait PowerGate {
    /// May `job` start at `t_s` on `gpus`? `false` keeps it queued.
    fn admit(&mut self, t_s: f64, job: usize, spec: &JobSpec, gpus: &[u32]) -> bool;
    /// `job` ended at `t_s` (completed or failed): its power goes back.
    fn release(&mut self, t_s: f64, job: usize);
    /// Jobs to stop at `t_s` because their lease was preempted and its grace period is over; the
    /// scheduler requeues them at the head of the queue (they restart from the beginning).
    fn take_preempted(&mut self, t_s: f64) -> Vec<usize>;
}

/// First-fit cluster scheduler.
#[derive(Debug, Clone)]
pub struct Cluster {
    next_arrival: usize,
    queue: VecDeque<usize>,
    running: Vec<Running>,
    free_slots: Vec<u32>,
    gpu_free: Vec<bool>,
    rack_order: Vec<u32>,
    stats: ClusterStats,
}

/// Jobs that wait longer than this many places in the queue are not looked at in one pass
/// (bounded work per step).
const QUEUE_SCAN_MAX: usize = 256;

impl Cluster {
    /// A scheduler for the plant's GPUs, all free.
    pub fn new(plant: &Plant) -> Self {
        let n = plant.topology().gpu_count;
        Self {
            next_arrival: 0,
            queue: VecDeque::new(),
            running: Vec::new(),
            free_slots: Vec::new(),
            gpu_free: vec![true; n],
            rack_order: (0..plant.topology().racks.len() as u32).collect(),
            stats: ClusterStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> ClusterStats {
        ClusterStats {
            queued: self.queue.len(),
            running: self.running.len(),
            busy_gpus: self.gpu_free.iter().filter(|f| !**f).count(),
            ..self.stats
        }
    }

    /// Bring the cluster to time `t_s`: fail, finish, admit and place jobs, then set utilisations.
    pub fn advance(&mut self, t_s: f64, workload: &WorkloadModel, plant: &mut Plant, advice: Option<&PlacementAdvice>) {
        self.advance_gated(t_s, workload, plant, advice, None);
    }

    /// [`Cluster::advance`], asking `gate` (when given) before each start, telling it of each end,
    /// and stopping the jobs it preempts.
    pub fn advance_gated(
        &mut self,
        t_s: f64,
        workload: &WorkloadModel,
        plant: &mut Plant,
        advice: Option<&PlacementAdvice>,
        mut gate: Option<&mut dyn PowerGate>,
    ) {
        let jobs = workload.jobs();
        if let Some(g) = gate.as_deref_mut() {
            for job in g.take_preempted(t_s) {
                if let Some(i) = self.running.iter().position(|r| r.job == job) {
                    let r = self.running.swap_remove(i);
                    self.release(plant, r);
                    self.queue.push_front(job);
                    self.stats.preempted += 1;
                }
            }
        }
        if let Some(a) = advice {
            self.set_rack_order(a, plant.topology().racks.len());
        }
        // Jobs with a GPU that shut down fail (synchronous jobs cannot continue without it).
        let dead: Vec<u32> = plant.newly_shut_down().to_vec();
        if !dead.is_empty() {
            let slots = plant.gpu_slots();
            let failed_slots: Vec<u32> = dead.iter().map(|&g| slots[g as usize]).filter(|&s| s != 0).collect();
            let mut i = 0;
            while i < self.running.len() {
                if failed_slots.contains(&self.running[i].slot) {
                    let r = self.running.swap_remove(i);
                    if let Some(g) = gate.as_deref_mut() {
                        g.release(t_s, r.job);
                    }
                    self.release(plant, r);
                    self.stats.failed += 1;
                    plant.record_failed_job();
                } else {
                    i += 1;
                }
            }
        }
        // Finished jobs.
        let mut i = 0;
        while i < self.running.len() {
            if t_s - self.running[i].start_s >= jobs[self.running[i].job].duration_s {
                let r = self.running.swap_remove(i);
                if let Some(g) = gate.as_deref_mut() {
                    g.release(t_s, r.job);
                }
                self.release(plant, r);
                self.stats.completed += 1;
            } else {
                i += 1;
            }
        }
        // Arrivals.
        while self.next_arrival < jobs.len() && jobs[self.next_arrival].arrival_s <= t_s {
            self.queue.push_back(self.next_arrival);
            self.next_arrival += 1;
        }
        // Placement: first fit, jobs in arrival order, smaller later jobs may pass a blocked one.
        let mut free = self
            .gpu_free
            .iter()
            .enumerate()
            .filter(|(g, f)| **f && !plant.gpu_is_down(*g))
            .count();
        let mut qi = 0;
        let mut scanned = 0;
        while qi < self.queue.len() && scanned < QUEUE_SCAN_MAX && free > 0 {
            scanned += 1;
            let job = self.queue[qi];
            let need = jobs[job].gpus as usize;
            if need == 0 || need > self.gpu_free.len() {
                // A job that can never run on this cluster is dropped, not kept forever.
                self.queue.remove(qi);
                continue;
            }
            if need > free {
                qi += 1;
                continue;
            }
            let gpus = self.pick(plant, need);
            if gpus.len() < need {
                qi += 1;
                continue;
            }
            if let Some(g) = gate.as_deref_mut() {
                if !g.admit(t_s, job, &jobs[job], &gpus) {
                    qi += 1;
                    continue;
                }
            }
            self.queue.remove(qi);
            free -= need;
            let slot = match self.free_slots.pop() {
                Some(s) => s,
                None => {
                    let s = plant.slot_count() as u32;
                    plant.ensure_slots(s as usize + 1);
                    s
                }
            };
            for &g in &gpus {
                self.gpu_free[g as usize] = false;
                plant.assign_gpu(g, slot);
            }
            self.running.push(Running {
                job,
                slot,
                start_s: t_s,
                gpus,
            });
            self.stats.started += 1;
        }
        for r in &self.running {
            let u = workload.utilisation(&jobs[r.job], t_s - r.start_s);
            plant.set_slot_util(r.slot, u);
        }
    }

    fn set_rack_order(&mut self, a: &PlacementAdvice, racks: usize) {
        let mut seen = vec![false; racks];
        self.rack_order.clear();
        for &r in &a.rack_order {
            if (r as usize) < racks && !seen[r as usize] {
                seen[r as usize] = true;
                self.rack_order.push(r);
            }
        }
        for (r, s) in seen.iter().enumerate() {
            if !s {
                self.rack_order.push(r as u32);
            }
        }
    }

    fn pick(&self, plant: &Plant, need: usize) -> Vec<u32> {
        let topo = plant.topology();
        let mut out = Vec::with_capacity(need);
        for &r in &self.rack_order {
            for g in topo.racks[r as usize].gpus.clone() {
                if self.gpu_free[g] && !plant.gpu_is_down(g) {
                    out.push(g as u32);
                    if out.len() == need {
                        return out;
                    }
                }
            }
        }
        out
    }

    fn release(&mut self, plant: &mut Plant, r: Running) {
        for &g in &r.gpus {
            self.gpu_free[g as usize] = true;
            plant.assign_gpu(g, 0);
        }
        plant.set_slot_util(r.slot, 0.0);
        self.free_slots.push(r.slot);
    }
}
