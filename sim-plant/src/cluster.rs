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
    /// The utilisation last set, when (s), and whether the plant was scoring then (the step it
    /// applies to is scored or not).
    util_since: (f64, f32, bool),
    /// Σ utilisation × time over the plant's scored window so far, per GPU, s: the job's work
    /// there at full speed (what a restart from the beginning throws away, at most).
    scored_util_s: f64,
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
    /// Rack of each GPU.
    gpu_rack: Vec<u32>,
    /// Free GPUs (`gpu_free`) per rack: placement skips full racks without scanning them.
    rack_free: Vec<u32>,
    /// Free GPUs in all (`gpu_free`, shut-down ones included).
    n_free: usize,
    rack_order: Vec<u32>,
    stats: ClusterStats,
}

/// Jobs that wait longer than this many places in the queue are not looked at in one pass
/// (bounded work per step).
const QUEUE_SCAN_MAX: usize = 256;

impl Cluster {
    /// A scheduler for the plant's GPUs, all free.
    pub fn new(plant: &Plant) -> Self {
        let topo = plant.topology();
        let n = topo.gpu_count;
        let mut gpu_rack = vec![0u32; n];
        let mut rack_free = vec![0u32; topo.racks.len()];
        for (r, rack) in topo.racks.iter().enumerate() {
            for g in rack.gpus.clone() {
                if let Some(x) = gpu_rack.get_mut(g) {
                    *x = r as u32;
                    rack_free[r] += 1;
                }
            }
        }
        Self {
            next_arrival: 0,
            queue: VecDeque::new(),
            running: Vec::new(),
            free_slots: Vec::new(),
            gpu_free: vec![true; n],
            gpu_rack,
            rack_free,
            n_free: n,
            rack_order: (0..plant.topology().racks.len() as u32).collect(),
            stats: ClusterStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> ClusterStats {
        ClusterStats {
            queued: self.queue.len(),
            running: self.running.len(),
            busy_gpus: self.gpu_free.len() - self.n_free,
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
                    let mut r = self.running.swap_remove(i);
                    // It restarts from the beginning: its work so far is thrown away.
                    Self::accrue(&mut r, t_s);
                    plant.record_thrown_away_work(r.gpus.len() as f64 * r.scored_util_s);
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
        // `free` only prunes (a job needing more is not tried); `pick` decides exactly.
        let free_down = plant
            .down_gpus()
            .filter(|&g| self.gpu_free.get(g).copied().unwrap_or(false) && plant.gpu_is_down(g))
            .count();
        let mut free = self.n_free - free_down.min(self.n_free);
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
                self.take(g);
                plant.assign_gpu(g, slot);
            }
            self.running.push(Running {
                job,
                slot,
                start_s: t_s,
                gpus,
                util_since: (t_s, 0.0, false),
                scored_util_s: 0.0,
            });
            self.stats.started += 1;
        }
        let scoring = plant.is_scoring();
        for r in &mut self.running {
            Self::accrue(r, t_s);
            let u = workload.utilisation(&jobs[r.job], t_s - r.start_s);
            r.util_since = (t_s, u, scoring);
            plant.set_slot_util(r.slot, u);
        }
    }

    /// Add the utilisation in force since it was set, up to `t_s`, to a job's scored work (if
    /// the plant was scoring when it was set).
    fn accrue(r: &mut Running, t_s: f64) {
        let (t0, u, scoring) = r.util_since;
        if scoring && t_s > t0 {
            r.scored_util_s += f64::from(u) * (t_s - t0);
        }
        r.util_since.0 = t_s;
    }

    /// The scheduler's outlook: the GPUs it expects busy at `t_s + h` for each `h` of
    /// `horizons_s`, from what it knows at `t_s` (call it after [`Cluster::advance`] to `t_s`):
    /// the running jobs with their start times, the queue, and each job's expected run time
    /// `expected_s(job)` (a duration predictor's, or the user's estimate; not the truth unless
    /// the caller passes it). Jobs not yet submitted are unknown and not counted.
    ///
    /// The queue is replayed on the expected ends in 5-minute rounds: at the end of each round the
    /// GPUs freed go to the waiting jobs in queue order, smaller later jobs passing a blocked one,
    /// as [`Cluster::advance`] places them (counts only, not racks). A job running past its expected
    /// end is expected to run on for half the time it has run (at least one round). Free GPUs
    /// that are down are not counted free. Horizons are capped at a week; a NaN horizon gets NaN.
    pub fn outlook(
        &self,
        plant: &Plant,
        t_s: f64,
        jobs: &[JobSpec],
        expected_s: &dyn Fn(usize) -> f64,
        horizons_s: &[f64],
    ) -> Vec<f64> {
        const ROUND_S: f64 = 300.0;
        const MAX_H_S: f64 = 7.0 * 86_400.0;
        let total = self.gpu_free.len() as i64;
        let free_down = plant
            .down_gpus()
            .filter(|&g| self.gpu_free.get(g).copied().unwrap_or(false) && plant.gpu_is_down(g))
            .count();
        let mut free = (self.n_free - free_down.min(self.n_free)) as i64;
        let key = |end: f64| std::cmp::Reverse((end.max(0.0) * 1e3) as u64);
        let mut ends: std::collections::BinaryHeap<(std::cmp::Reverse<u64>, u32)> = self
            .running
            .iter()
            .map(|r| {
                let exp = expected_s(r.job).max(0.0);
                let end = if r.start_s + exp > t_s {
                    r.start_s + exp
                } else {
                    t_s + (0.5 * (t_s - r.start_s)).max(ROUND_S)
                };
                (key(end), r.gpus.len() as u32)
            })
            .collect();
        let mut queue: Vec<usize> = self.queue.iter().copied().collect();
        let h_max = horizons_s
            .iter()
            .copied()
            .filter(|h| h.is_finite())
            .fold(0.0, f64::max)
            .min(MAX_H_S);
        let mut order: Vec<usize> = (0..horizons_s.len()).filter(|&i| !horizons_s[i].is_nan()).collect();
        order.sort_by(|&a, &b| horizons_s[a].total_cmp(&horizons_s[b]));
        let mut out = vec![f64::NAN; horizons_s.len()];
        let mut next = order.iter().peekable();
        let mut round = 0u32;
        let mut round_end = t_s;
        loop {
            // Release what ends by the end of this round, then start what fits.
            while let Some(&(std::cmp::Reverse(e), g)) = ends.peek() {
                if e > (round_end * 1e3) as u64 {
                    break;
                }
                ends.pop();
                free += g as i64;
            }
            let mut qi = 0;
            let mut scanned = 0;
            while qi < queue.len() && scanned < QUEUE_SCAN_MAX && free > 0 {
                scanned += 1;
                let need = jobs.get(queue[qi]).map_or(0, |j| j.gpus as i64);
                if need == 0 || need > total || need > free {
                    qi += 1;
                    continue;
                }
                let job = queue.remove(qi);
                free -= need;
                ends.push((key(round_end + expected_s(job).max(0.0)), need as u32));
            }
            while let Some(&&i) = next.peek() {
                if horizons_s[i] > round_end - t_s + 1e-9 && round_end - t_s < h_max {
                    break;
                }
                // The busy count at the end of the round that reaches this horizon.
                out[i] = (total - free) as f64;
                next.next();
            }
            if next.peek().is_none() {
                break;
            }
            round += 1;
            round_end = t_s + round as f64 * ROUND_S;
        }
        out
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
            if self.rack_free[r as usize] == 0 {
                continue;
            }
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

    fn take(&mut self, g: u32) {
        if let Some(f) = self.gpu_free.get_mut(g as usize) {
            if *f {
                *f = false;
                self.n_free -= 1;
                self.rack_free[self.gpu_rack[g as usize] as usize] -= 1;
            }
        }
    }

    fn give_back(&mut self, g: u32) {
        if let Some(f) = self.gpu_free.get_mut(g as usize) {
            if !*f {
                *f = true;
                self.n_free += 1;
                self.rack_free[self.gpu_rack[g as usize] as usize] += 1;
            }
        }
    }

    fn release(&mut self, plant: &mut Plant, r: Running) {
        for &g in &r.gpus {
            self.give_back(g);
            plant.assign_gpu(g, 0);
        }
        plant.set_slot_util(r.slot, 0.0);
        self.free_slots.push(r.slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::SyntheticWorkload;
    use coolplane_core::signals::Actions;
    use coolplane_core::site::builtin_site;
    use coolplane_core::weather::{SyntheticClimate, WeatherSeries};

    /// A gate that admits every job and preempts the first one it admitted at `preempt_at_s`.
    struct PreemptOnce {
        first: Option<usize>,
        preempt_at_s: f64,
        done: bool,
    }

    impl PowerGate for PreemptOnce {
        fn admit(&mut self, _t_s: f64, job: usize, _spec: &JobSpec, _gpus: &[u32]) -> bool {
            self.first.get_or_insert(job);
            true
        }
        fn release(&mut self, _t_s: f64, _job: usize) {}
        fn take_preempted(&mut self, t_s: f64) -> Vec<usize> {
            if self.done || t_s < self.preempt_at_s {
                return Vec::new();
            }
            self.done = true;
            self.first.into_iter().collect()
        }
    }

    /// A preempted job restarts from the beginning: the plant counts the work it did within the
    /// scored window as thrown away (its GPUs × its utilisation × the scored time it ran), and
    /// the verdict divides the facility energy by the work kept. Nothing is counted for time
    /// before scoring, nor without a preemption.
    #[test]
    fn a_preempted_jobs_scored_work_is_thrown_away_and_not_in_the_verdict() {
        let site = builtin_site("supernode-640").unwrap();
        let weather = WeatherSeries::synthetic(&SyntheticClimate::default(), 3);
        let run = |preempt_at_s: f64| {
            let mut plant = Plant::new(&site, 3).unwrap();
            let n = plant.topology().gpu_count as u32;
            let wl = WorkloadModel::synthetic(&SyntheticWorkload::default(), n, 6.0 * 3600.0, 3);
            let mut c = Cluster::new(&plant);
            let mut gate = PreemptOnce {
                first: None,
                preempt_at_s,
                done: false,
            };
            let (mut expect, mut started_s) = (0.0, None);
            for k in 0..180 {
                let t = k as f64 * 60.0;
                if k == 60 {
                    plant.start_scoring();
                }
                c.advance_gated(t, &wl, &mut plant, None, Some(&mut gate));
                // The first job's utilisation over the scored steps it ran, until its preemption.
                if let Some(j) = gate.first {
                    started_s.get_or_insert(t);
                    if let Some(r) = c.running.iter().find(|r| r.job == j && !gate.done) {
                        if k >= 60 {
                            expect +=
                                r.gpus.len() as f64 * f64::from(wl.utilisation(&wl.jobs()[j], t - r.start_s)) * 60.0;
                        }
                    }
                }
                plant.step(60.0, &weather.sample(t), &Actions::default());
            }
            (plant.kpis(), expect, c.stats().preempted)
        };
        // Preempted at 2 h, an hour into the scored window.
        let (k, expect, preempted) = run(7200.0);
        assert_eq!(preempted, 1);
        assert!(expect > 0.0, "the job ran in the scored window");
        assert!(
            (k.work_thrown_away_gpu_s - expect).abs() <= 1e-6 * expect,
            "thrown away {} GPU-s, its scored work {expect}",
            k.work_thrown_away_gpu_s
        );
        assert!(k.work_thrown_away_gpu_s < k.work_done_gpu_s);
        let kept = (k.work_done_gpu_s - k.work_thrown_away_gpu_s) / 3600.0;
        assert!((k.useful_work_gpu_h() - kept).abs() < 1e-9);
        assert!(k.facility_kwh_per_gpu_h() > k.facility_energy_kwh / (k.work_done_gpu_s / 3600.0));
        // Preempted before scoring began: nothing of it is in the scored window's work.
        let (k, _, preempted) = run(1800.0);
        assert_eq!(preempted, 1);
        assert_eq!(k.work_thrown_away_gpu_s, 0.0);
        // Never preempted.
        let (k, _, preempted) = run(f64::INFINITY);
        assert_eq!(preempted, 0);
        assert_eq!(k.work_thrown_away_gpu_s, 0.0);
        assert_eq!(
            k.facility_kwh_per_gpu_h(),
            k.facility_energy_kwh / (k.work_done_gpu_s / 3600.0)
        );
    }

    /// The free counts kept on the way equal a scan of the GPUs, and the placement equals a
    /// first fit that scans every rack (full racks skipped only as an optimisation).
    #[test]
    fn free_counts_match_a_scan_and_placement_is_first_fit() {
        let site = builtin_site("supernode-640").unwrap();
        let mut plant = Plant::new(&site, 3).unwrap();
        let n = plant.topology().gpu_count as u32;
        let wl = WorkloadModel::synthetic(&SyntheticWorkload::default(), n, 4.0 * 3600.0, 3);
        let weather = WeatherSeries::synthetic(&SyntheticClimate::default(), 3);
        let mut c = Cluster::new(&plant);
        let mut placed = 0;
        for k in 0..240 {
            let t = k as f64 * 60.0;
            let before: Vec<bool> = c.gpu_free.clone();
            c.advance(t, &wl, &mut plant, None);
            // Every GPU taken this step must be the lowest-index free GPU at the time it was
            // taken (first fit in rack order = index order without advice).
            let mut taken: Vec<usize> = (0..before.len()).filter(|&g| before[g] && !c.gpu_free[g]).collect();
            taken.sort_unstable();
            let mut expect_free: Vec<usize> = (0..before.len()).filter(|&g| before[g]).collect();
            expect_free.truncate(taken.len());
            let released_this_step = (0..before.len()).any(|g| !before[g] && c.gpu_free[g]);
            if !released_this_step {
                assert_eq!(taken, expect_free, "step {k}");
            }
            placed += taken.len();
            let scan = c.gpu_free.iter().filter(|f| **f).count();
            assert_eq!(c.n_free, scan, "step {k}");
            for (r, rack) in plant.topology().racks.iter().enumerate() {
                let s = rack.gpus.clone().filter(|&g| c.gpu_free[g]).count() as u32;
                assert_eq!(c.rack_free[r], s, "rack {r} step {k}");
            }
            plant.step(60.0, &weather.sample(t), &Actions::default());
        }
        assert!(placed > 0, "the workload placed jobs");
        assert!(c.stats().started > 0);
    }

    /// Once no more jobs arrive, the outlook on the true run times foresees the busy count the
    /// cluster then has (up to the 5-minute rounds of the replay), and an outlook on run times
    /// off by a factor of two does measurably worse.
    #[test]
    fn the_outlook_on_true_run_times_foresees_the_busy_gpus() {
        let site = builtin_site("supernode-640").unwrap();
        let mut plant = Plant::new(&site, 5).unwrap();
        let n = plant.topology().gpu_count as u32;
        // Jobs arrive over the first 3 h only; the outlook is taken at 3 h.
        let wl = WorkloadModel::synthetic(&SyntheticWorkload::default(), n, 3.0 * 3600.0, 5);
        let jobs = wl.jobs().to_vec();
        assert!(jobs.iter().all(|j| j.arrival_s < 3.0 * 3600.0));
        let weather = WeatherSeries::synthetic(&SyntheticClimate::default(), 5);
        let mut c = Cluster::new(&plant);
        let t0 = 3.0 * 3600.0;
        let horizons = [0.0, 900.0, 3600.0, 4.0 * 3600.0];
        let mut seen = Vec::new();
        let (mut truth, mut wrong) = (Vec::new(), Vec::new());
        for k in 0..=(8 * 60) {
            let t = k as f64 * 60.0;
            c.advance(t, &wl, &mut plant, None);
            if (t - t0).abs() < 1.0 {
                truth = c.outlook(&plant, t, &jobs, &|j| jobs[j].duration_s, &horizons);
                wrong = c.outlook(&plant, t, &jobs, &|j| 2.0 * jobs[j].duration_s, &horizons);
                let odd = c.outlook(&plant, t, &jobs, &|j| jobs[j].duration_s, &[f64::NAN, 1e12, -5.0]);
                assert!(odd[0].is_nan() && odd[1].is_finite() && odd[2] == truth[0], "{odd:?}");
                assert_eq!(truth[0], c.stats().busy_gpus as f64, "now is what is busy now");
            }
            for &h in &horizons {
                if (t - (t0 + h)).abs() < 1.0 {
                    seen.push(c.stats().busy_gpus as f64);
                }
            }
            plant.step(60.0, &weather.sample(t), &Actions::default());
        }
        assert_eq!(seen.len(), horizons.len());
        let err = |o: &[f64]| o.iter().zip(&seen).map(|(a, b)| (a - b).abs()).sum::<f64>() / seen.len() as f64;
        assert!(seen.iter().any(|&b| b != seen[0]), "the busy count moves: {seen:?}");
        assert!(err(&truth) <= 0.03 * n as f64, "true run times: {truth:?} vs {seen:?}");
        println!("true run times {truth:?}, doubled {wrong:?}, seen {seen:?}");
        assert!(
            err(&wrong) > 3.0 * err(&truth) + 0.005 * n as f64,
            "doubled run times: {wrong:?} vs {seen:?}"
        );
    }
}
