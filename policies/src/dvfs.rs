//! DVFS power caps that respect value: the fast loop that holds the site power budget.
//!
//! Every controller tick (seconds, not the minute of the cooling loop) the [`BudgetGovernor`]
//! reads the site meter and the budget in force. When the facility draws more than the budget
//! less a margin, it sheds GPU power where the measured performance-vs-power curve (the site's
//! characterisation, [`GpuModel::perf_at_power_ratio`]) says a watt buys the least work; it lifts
//! the caps as soon as they are no longer needed.
//!
//! **Value.** Work is what the plant's KPIs count: utilisation × relative speed. A GPU that
//! demands `d` W at utilisation `u` and is capped to the fraction `x` of its demand does
//! `u·perf(x)`; shedding its watts costs `u·Δperf/(d·Δx)` of work per watt, a slope that grows as
//! the cap deepens (the curve is concave). Minimising the work lost for a given shed is then a
//! linear programme over convex piecewise-linear losses, whose optimum is greedy: cut the
//! segments in order of their slope ([`least_loss_shed`]). A busy GPU far above its knee gives
//! its watts cheaply; a GPU already at its knee, or lightly used, costs more per watt; an idle
//! GPU draws less than the lowest cap and is never touched. Where many GPUs sit at the same
//! marginal slope (within 2 %) the last part of the cut is spread evenly over them, so the GPUs of
//! one job get the same cap.
//!
//! Job priorities are not in the process image: the scheduler holds them in its leases, and the
//! budget ledger (`coolplane-controller::ledger`) lowers grants lowest priority first. This loop
//! works on what the meters and the GPUs report, for sites whose scheduler does not lease power.
//!
//! **Feedback, not accumulation.** Each tick the shed needed is computed afresh from measurements:
//! the shed in force (Σ demand − Σ draw of the GPUs held at a cap) plus the excess over the target
//! divided by the facility watts per IT watt (the meter's facility / IT). Cutting is immediate;
//! lifting waits until the facility is below the target by a release band and then lifts half of
//! the room each tick, so the loop neither chatters nor overshoots back over the budget.
//!
//! **Fail-closed.** On a stale or bad meter or budget reading, or stale GPU telemetry, the caps in
//! force are held (never raised) and the reason is said once; the controller clamps every limit
//! to the device's range and never raises one on stale data.

use crate::PolicyInput;
use coolplane_core::signals::{Measurements, RackPowerLimits};
use coolplane_core::site::{Electrical, GpuModel};
use coolplane_core::topology::Topology;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Tuning of the budget governor.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GovernorConfig {
    /// The facility is held at or below the budget less this fraction of it.
    pub margin_frac: f64,
    /// Caps are lifted only once the facility is below the target by this fraction of the budget.
    pub release_frac: f64,
    /// A meter or GPU reading older than this is stale, s.
    pub stale_after_s: f64,
    /// A GPU's cap is sent again only when it moves by more than this, W.
    pub min_change_w: f64,
    /// Time constant of the smoothing of the unmetered overhead (utility meter − rack meters
    /// through the chain's losses − the metered cooling), s.
    pub overhead_tau_s: f64,
}

impl Default for GovernorConfig {
    fn default() -> Self {
        Self {
            margin_frac: 0.003,
            release_frac: 0.002,
            stale_after_s: 30.0,
            min_change_w: 5.0,
            overhead_tau_s: 60.0,
        }
    }
}

/// Something an operator should read: a warning (shedding began, caps held on stale data) or
/// information (caps lifted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// Warning (true) or information.
    pub warning: bool,
    /// What happened, in words.
    pub message: String,
}

/// What the fast loop asks for this tick.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FastDecision {
    /// Power-limit changes (racks whose caps moved).
    pub power_limits: Vec<RackPowerLimits>,
    /// Changes an operator should hear of.
    pub notices: Vec<Notice>,
}

/// The governor's state as the plan and the operators see it.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct GovernorStatus {
    /// Caps are in force for the budget.
    pub active: bool,
    /// Budget in force, kW (NaN when unknown).
    pub budget_kw: f64,
    /// Facility power at the last tick, kW.
    pub facility_kw: f64,
    /// GPU power the caps take below demand, kW.
    pub shed_kw: f64,
    /// GPUs held at a cap for the budget.
    pub gpus_capped: usize,
    /// Work the caps cost, % of the work the GPUs would do uncapped (estimate from the curve).
    pub work_lost_pct: f64,
}

impl GovernorStatus {
    /// One line for the plan and the logs.
    pub fn describe(&self) -> String {
        if self.active {
            format!(
                "site budget {:.0} kW held: {:.0} kW of GPU power shed on {} GPU(s) where a watt buys least work (≈ {:.2} % of their work)",
                self.budget_kw, self.shed_kw, self.gpus_capped, self.work_lost_pct
            )
        } else {
            "no budget caps: the site is within its budget".into()
        }
    }
}

/// One GPU as the allocation sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuDemand {
    /// Power it would draw uncapped, W.
    pub demand_w: f64,
    /// Utilisation, 0–1 (its weight in the work).
    pub util: f64,
}

/// The cooling equipment's metered power (CDU pumps, facility pumps, heat-rejection fans and
/// chillers), W; `None` unless every reading is usable (the overhead is then smoothed whole).
fn metered_cooling_w(m: &Measurements, now: f64, stale: f64) -> Option<f64> {
    let mut w = 0.0;
    for c in &m.cdus {
        w += c.pump_power_kw.usable(now, stale).then_some(c.pump_power_kw.value)?;
    }
    for f in &m.facilities {
        for r in [&f.pump_power_kw, &f.fan_power_kw, &f.chiller_power_kw] {
            w += r.usable(now, stale).then_some(r.value)?;
        }
    }
    Some(w * 1e3)
}

/// Power ratios at which the loss of a GPU is linearised (its curve's knee is added when it
/// has one; the knee curve is exact on these segments).
const BREAKS: [f64; 7] = [0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4];

/// Slopes within this fraction of the marginal one share the last part of the cut evenly.
const TIE_FRAC: f64 = 0.02;

/// The cut per GPU (W below its demand) that sheds `shed_w` watts for the least work lost under
/// `gpu`'s performance curve, no GPU below `min_cap_w`; and the work lost (in GPUs at full speed,
/// Σ u·(1 − perf)). Sheds less when the GPUs cannot give `shed_w` above their lowest caps.
pub fn least_loss_shed(gpu: &GpuModel, min_cap_w: f64, gpus: &[GpuDemand], shed_w: f64) -> (Vec<f64>, f64) {
    let mut cut = vec![0.0; gpus.len()];
    if shed_w.is_nan() || shed_w <= 0.0 {
        return (cut, 0.0);
    }
    // Segments: (slope of work per watt, watts, GPU).
    let mut segs: Vec<(f64, f64, u32)> = Vec::with_capacity(gpus.len() * 3);
    let knee = gpu.perf_knee.map(|k| k[1]);
    for (i, g) in gpus.iter().enumerate() {
        let d = g.demand_w;
        if !(d.is_finite() && d > min_cap_w + 0.5 && g.util.is_finite()) {
            continue;
        }
        let u = g.util.clamp(0.0, 1.0);
        let x_min = min_cap_w / d;
        let mut xs: Vec<f64> = BREAKS
            .iter()
            .copied()
            .chain(knee)
            .filter(|&x| x > x_min && x < 1.0)
            .collect();
        xs.push(x_min);
        xs.sort_by(|a, b| b.total_cmp(a));
        let mut x_hi = 1.0;
        for x in xs {
            let w = (x_hi - x) * d;
            if w > 1e-9 {
                let loss = u * (gpu.perf_at_power_ratio(x_hi) - gpu.perf_at_power_ratio(x));
                segs.push((loss.max(0.0) / w, w, i as u32));
            }
            x_hi = x;
        }
    }
    // Convex losses: within one GPU the slopes do not fall as the cut deepens, so taking the
    // segments in slope order (ties by GPU, then depth, which the stable sort keeps) is optimal.
    segs.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Slopes within TIE_FRAC of each other form one level: a level is taken whole, or (the
    // marginal one) the same fraction of each of its segments, so GPUs alike get the same cap.
    let mut left = shed_w;
    let mut i = 0;
    while i < segs.len() && left > 0.0 {
        let band = segs[i].0 * (1.0 + TIE_FRAC) + 1e-15;
        let mut j = i;
        let mut width = 0.0;
        while j < segs.len() && segs[j].0 <= band {
            width += segs[j].1;
            j += 1;
        }
        let frac = (left / width).min(1.0);
        for &(_, w, g) in &segs[i..j] {
            cut[g as usize] += w * frac;
        }
        left -= width * frac;
        i = j;
    }
    let lost = cut
        .iter()
        .zip(gpus)
        .filter(|(c, _)| **c > 0.0)
        .map(|(c, g)| g.util.clamp(0.0, 1.0) * (1.0 - gpu.perf_at_power_ratio((g.demand_w - c) / g.demand_w)))
        .sum();
    (cut, lost)
}

/// The fast budget loop (see the module documentation).
#[derive(Debug, Clone)]
pub struct BudgetGovernor {
    cfg: GovernorConfig,
    gpu: GpuModel,
    racks: Vec<Range<usize>>,
    /// Cap last sent per GPU, W (TDP: none).
    sent: Vec<f32>,
    /// GPU power the caps are meant to shed, W.
    shed_w: f64,
    status: GovernorStatus,
    /// Why caps are held as they are (said once per spell).
    holding: Option<String>,
    /// Shed last reported to operators, W.
    reported_shed_w: f64,
    last_report_s: f64,
    /// Overhead (facility − IT through the electrical chain − the metered cooling), smoothed, W.
    overhead_w: Option<f64>,
    /// The metered cooling at the last tick, W (`None`: some reading was not usable).
    metered_w: Option<f64>,
    /// The site's electrical chain (nameplate), for the losses that follow the IT load.
    electrical: Option<Electrical>,
    last_t: Option<f64>,
}

impl BudgetGovernor {
    /// For the site's GPUs.
    pub fn new(gpu: &GpuModel, topo: &Topology, cfg: GovernorConfig) -> Self {
        Self {
            cfg,
            gpu: gpu.clone(),
            racks: topo.racks.iter().map(|r| r.gpus.clone()).collect(),
            sent: vec![gpu.tdp_w as f32; topo.gpu_count],
            shed_w: 0.0,
            status: GovernorStatus {
                budget_kw: f64::NAN,
                facility_kw: f64::NAN,
                ..Default::default()
            },
            holding: None,
            reported_shed_w: 0.0,
            last_report_s: f64::NEG_INFINITY,
            overhead_w: None,
            metered_w: None,
            last_t: None,
            electrical: None,
        }
    }

    /// With the site's electrical chain: its losses are counted with the fast IT measurement
    /// (without it, only the smoothed overhead carries them).
    pub fn with_electrical(mut self, e: &Electrical) -> Self {
        self.electrical = Some(e.clone());
        self
    }

    /// The state as of the last tick.
    pub fn status(&self) -> GovernorStatus {
        self.status
    }

    /// One tick of the fast loop.
    pub fn tick(&mut self, input: &PolicyInput<'_>) -> FastDecision {
        let now = input.now_s;
        let m = input.image;
        let mut out = FastDecision::default();
        let tdp = self.gpu.tdp_w;
        let min_cap = input.limits.gpu_min_cap_w.max(self.gpu.min_cap_w);
        let n = self.sent.len();
        let stale = self.cfg.stale_after_s;
        let meter = &m.meter;
        let why_hold = if !meter.facility_power_kw.usable(now, stale) || !meter.it_power_kw.usable(now, stale) {
            Some("site meter stale or bad")
        } else if !meter.power_budget_kw.usable(now, stale) || meter.power_budget_kw.value <= 0.0 {
            Some("power budget not reported")
        } else if now - m.gpus.t_s > stale
            || m.gpus.power_w.len() != n
            || m.gpus.util.len() != n
            || m.gpus.temp_c.len() != n
        {
            Some("GPU telemetry stale")
        } else {
            None
        };
        if let Some(why) = why_hold {
            if self.holding.is_none() && self.shed_w > 0.0 {
                out.notices.push(Notice {
                    warning: true,
                    message: format!("power budget loop: {why}: caps held as they are (none raised)"),
                });
            }
            self.holding = Some(why.into());
            return out;
        }
        if self.holding.take().is_some() && self.shed_w > 0.0 {
            out.notices.push(Notice {
                warning: false,
                message: "power budget loop: inputs fresh again: resuming".into(),
            });
        }
        let budget_w = meter.power_budget_kw.value * 1e3;
        let meter_w = meter.facility_power_kw.value * 1e3;
        // The facility power as the sum of the rack meters (fast, and their independent errors
        // average out over hundreds of racks) through the chain's losses, plus the metered
        // cooling as read, plus the rest of the overhead (utility meter − those), smoothed (it
        // moves over minutes; the utility meter alone is as noisy as the margin).
        let racks_w = m
            .racks
            .iter()
            .try_fold(0.0, |a, r| {
                r.it_power_kw
                    .usable(now, stale)
                    .then_some(a + r.it_power_kw.value * 1e3)
            })
            .filter(|_| m.racks.len() == self.racks.len());
        let it_w = racks_w.unwrap_or(meter.it_power_kw.value * 1e3);
        let dt = self.last_t.map_or(f64::INFINITY, |t| (now - t).max(0.0));
        self.last_t = Some(now);
        let alpha = 1.0 - (-dt / self.cfg.overhead_tau_s).exp();
        // The electrical chain's losses follow the IT load at once: they move with the fast part.
        let chain = self.electrical.as_ref().map_or(1.0, |e| chain_marginal(e, it_w));
        // The metered cooling (pumps, fans, chillers) steps when equipment stages, a chiller
        // stage by about 100 kW at once on hall-10k: it is taken as read, and only the rest of
        // the overhead is smoothed (before, a chiller start took the budget over for 35 s). Every
        // cooling reading is taken to be behind the budget's meter.
        let metered = metered_cooling_w(m, now, stale);
        // When a cooling reading goes stale or comes back, the smoothed part takes the metered
        // cooling over (or hands it back), so the estimate does not step and lift caps.
        if let Some(o) = self.overhead_w.as_mut() {
            match (self.metered_w, metered) {
                (Some(c), None) => *o += c,
                (None, Some(c)) => *o -= c,
                _ => {}
            }
        }
        self.metered_w = metered;
        let cooling_w = metered.unwrap_or(0.0);
        let raw = meter_w - chain * it_w - cooling_w;
        let overhead = match self.overhead_w {
            Some(o) if o.is_finite() => o + alpha * (raw - o),
            _ => raw,
        };
        self.overhead_w = Some(overhead);
        let facility_w = chain * it_w + cooling_w + overhead;
        let k = if it_w > 0.0 {
            (facility_w / it_w).clamp(1.0, 2.0)
        } else {
            1.0
        };
        let target_w = budget_w * (1.0 - self.cfg.margin_frac);
        let excess_w = facility_w - target_w;
        // Under the target with nothing shed and every cap it sent lifted: nothing to decide (the
        // per-GPU work below is skipped; it is most ticks of most days).
        if self.shed_w == 0.0 && excess_w <= 0.0 && self.sent.iter().all(|&c| c == tdp as f32) {
            self.status = GovernorStatus {
                active: false,
                budget_kw: budget_w / 1e3,
                facility_kw: facility_w / 1e3,
                shed_kw: 0.0,
                gpus_capped: 0,
                work_lost_pct: 0.0,
            };
            return out;
        }

        // Demand per GPU: what it draws when no cap holds it; the model's demand (static power at
        // its die temperature + utilisation × dynamic range) when it draws at its limit.
        let (gpus, shed_in_force) = demands(&self.gpu, m);
        // Over the target, each facility watt is taken as one GPU watt: in the seconds that
        // count only the IT load and its electrical losses fall (cooling follows over minutes),
        // so dividing by the average facility/IT would shed too little and stay over. Under
        // it, the room is lifted at the average ratio, half at a time.
        let needed = if excess_w > 0.0 {
            shed_in_force + excess_w
        } else {
            (shed_in_force + excess_w / k).max(0.0)
        };
        let total_demand: f64 = gpus.iter().map(|g| g.demand_w).sum();
        let new_shed = if excess_w > 0.0 {
            needed.max(self.shed_w)
        } else if excess_w < -self.cfg.release_frac * budget_w {
            // Lift half of the room each tick.
            self.shed_w - 0.5 * (self.shed_w - needed).max(0.0)
        } else {
            self.shed_w
        };
        let new_shed = if new_shed < 1e-3 * total_demand.max(1.0) {
            0.0
        } else {
            new_shed
        };
        let (cut, lost) = least_loss_shed(&self.gpu, min_cap, &gpus, new_shed);
        let was_active = self.shed_w > 0.0;
        self.shed_w = new_shed;

        // Caps: demand − cut for the GPUs cut, none (TDP) for the others.
        let min_change = self.cfg.min_change_w as f32;
        let mut capped = 0usize;
        for (r, range) in self.racks.iter().enumerate() {
            let mut changed = false;
            let mut limits = Vec::with_capacity(range.len());
            for g in range.clone() {
                let cap = if cut[g] > 0.5 {
                    capped += 1;
                    ((gpus[g].demand_w - cut[g]).max(min_cap)) as f32
                } else {
                    tdp as f32
                };
                let prev = self.sent[g];
                // Always send a lift to TDP and a deeper cut; a small move of a cap is not sent.
                let send = (cap - prev).abs() > min_change || (cap == tdp as f32 && prev != cap);
                if send {
                    changed = true;
                    self.sent[g] = cap;
                }
                limits.push(self.sent[g]);
            }
            if changed {
                out.power_limits.push(RackPowerLimits {
                    rack: r as u32,
                    limits_w: limits,
                });
            }
        }
        let worked: f64 = gpus.iter().map(|g| g.util).sum();
        self.status = GovernorStatus {
            active: new_shed > 0.0,
            budget_kw: budget_w / 1e3,
            facility_kw: facility_w / 1e3,
            shed_kw: new_shed / 1e3,
            gpus_capped: capped,
            work_lost_pct: if worked > 0.0 { 100.0 * lost / worked } else { 0.0 },
        };
        // Operators hear of the start, of a change of the shed by a quarter (at most every five
        // minutes), and of the end.
        let s = self.status;
        if new_shed > 0.0 && !was_active {
            out.notices.push(Notice {
                warning: true,
                message: format!(
                    "site power {:.0} kW above {:.0} kW (budget {:.0} kW less {:.0} %): {}",
                    facility_w / 1e3,
                    target_w / 1e3,
                    budget_w / 1e3,
                    100.0 * self.cfg.margin_frac,
                    s.describe()
                ),
            });
            self.reported_shed_w = new_shed;
            self.last_report_s = now;
        } else if new_shed == 0.0 && was_active {
            out.notices.push(Notice {
                warning: false,
                message: format!(
                    "site power {:.0} kW, budget {:.0} kW: budget caps lifted",
                    facility_w / 1e3,
                    budget_w / 1e3
                ),
            });
            self.reported_shed_w = 0.0;
        } else if new_shed > 0.0
            && (new_shed - self.reported_shed_w).abs() > 0.25 * self.reported_shed_w
            && now - self.last_report_s >= 300.0
        {
            out.notices.push(Notice {
                warning: false,
                message: s.describe(),
            });
            self.reported_shed_w = new_shed;
            self.last_report_s = now;
        }
        out
    }
}

/// Facility watts per IT watt through the electrical chain at IT load `it_w` (nameplate: PDU
/// efficiency, UPS efficiency curve, transformer load loss ∝ load²), the chain's marginal ratio.
pub fn chain_marginal(e: &Electrical, it_w: f64) -> f64 {
    let input = |it: f64| {
        let pdu_in = it / e.pdu_efficiency.clamp(0.5, 1.0);
        let x = pdu_in / (e.ups_rating_kw * 1e3).max(1.0);
        let c = &e.ups_efficiency_curve;
        let eff = match c.iter().position(|p| p[0] >= x) {
            _ if c.is_empty() => 1.0,
            Some(0) => c[0][1],
            Some(i) => c[i - 1][1] + (c[i][1] - c[i - 1][1]) * (x - c[i - 1][0]) / (c[i][0] - c[i - 1][0]).max(1e-9),
            None => c[c.len() - 1][1],
        };
        let ups_in = pdu_in / eff.clamp(0.5, 1.0);
        let rating = (e.transformer_rating_kva * 1e3).max(1.0);
        ups_in + rating * e.transformer_load_loss_pct / 100.0 * (ups_in / rating).powi(2)
    };
    let it = it_w.max(1e3);
    let m = (input(it * 1.01) - input(it * 0.99)) / (0.02 * it);
    if m.is_finite() {
        m.clamp(1.0, 1.5)
    } else {
        1.0
    }
}

/// Per-GPU demand and utilisation from telemetry, and the GPU power the caps in force shed (W).
/// A GPU drawing within 2 W of its limit is held by it: its demand is the model's (static power
/// at its reported die temperature + utilisation × the dynamic range); any other draws its
/// demand. A dead or unreadable GPU demands nothing.
pub fn demands(gpu: &GpuModel, m: &Measurements) -> (Vec<GpuDemand>, f64) {
    let t = &m.gpus;
    let mut shed = 0.0;
    let v = (0..t.power_w.len())
        .map(|i| {
            let p = t.power_w[i] as f64;
            let u = t.util.get(i).copied().unwrap_or(f32::NAN) as f64;
            let lim = t.power_limit_w.get(i).copied().unwrap_or(f32::NAN) as f64;
            let temp = t.temp_c.get(i).copied().unwrap_or(f32::NAN) as f64;
            if !(p.is_finite() && p >= 0.0 && u.is_finite()) {
                return GpuDemand {
                    demand_w: 0.0,
                    util: 0.0,
                };
            }
            let at_limit = lim.is_finite() && p >= lim - 2.0 && lim < gpu.tdp_w - 1.0;
            let d = if at_limit && temp.is_finite() {
                gpu.power_and_speed(temp, u.clamp(0.0, 1.0), gpu.tdp_w).0.max(p)
            } else {
                p
            };
            shed += d - p;
            GpuDemand {
                demand_w: d,
                util: u.clamp(0.0, 1.0),
            }
        })
        .collect();
    (v, shed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PlantLimits;
    use coolplane_core::signals::Reading;
    use coolplane_core::site::{builtin_site, Site};

    fn site() -> Site {
        builtin_site("hall-10k").unwrap()
    }

    /// A process image of `n` GPUs at full load drawing their demand (or their cap), the meters
    /// consistent with it: IT = GPUs + `other_w`, facility = IT × 1.07.
    fn image(n: usize, caps: &[f32], budget_kw: f64, t: f64, other_w: f64) -> Measurements {
        let mut m = Measurements {
            t_s: t,
            ..Default::default()
        };
        let g = &mut m.gpus;
        g.t_s = t;
        g.temp_c = vec![70.0; n];
        g.util = (0..n).map(|i| if i % 4 == 3 { 0.5 } else { 1.0 }).collect();
        let gpu = site().gpu;
        g.power_limit_w = caps.to_vec();
        g.power_w = (0..n)
            .map(|i| {
                let d = gpu.power_and_speed(70.0, g.util[i] as f64, gpu.tdp_w).0 as f32;
                d.min(caps[i])
            })
            .collect();
        let it = g.power_w.iter().map(|&p| p as f64).sum::<f64>() + other_w;
        m.meter.it_power_kw = Reading::good(it / 1e3, t);
        m.meter.facility_power_kw = Reading::good(1.07 * it / 1e3, t);
        m.meter.power_budget_kw = Reading::good(budget_kw, t);
        m
    }

    #[test]
    fn the_governor_sheds_at_once_holds_the_budget_and_lifts_when_it_can() {
        let site = site();
        let topo = Topology::new(&site);
        let limits = PlantLimits::from_site(&site, &topo);
        let current = limits.design_setpoints();
        let n = topo.gpu_count;
        let mut gov = BudgetGovernor::new(&site.gpu, &topo, GovernorConfig::default());
        let mut caps = vec![site.gpu.tdp_w as f32; n];
        let other = 1.5e6;
        let tick = |gov: &mut BudgetGovernor, caps: &mut Vec<f32>, budget: f64, t: f64, stale: bool| {
            let mut m = image(n, caps, budget, t, other);
            if stale {
                m.meter.facility_power_kw.t_s = t - 120.0;
            }
            let out = gov.tick(&PolicyInput {
                now_s: t,
                image: &m,
                limits: &limits,
                topology: &topo,
                current: &current,
            });
            for pl in &out.power_limits {
                caps[topo.racks[pl.rack as usize].gpus.clone()].copy_from_slice(&pl.limits_w);
            }
            (out, m.meter.facility_power_kw.value)
        };
        // Within the budget: nothing.
        let (out, f0) = tick(&mut gov, &mut caps, 1e6, 0.0, false);
        assert!(out.power_limits.is_empty() && out.notices.is_empty() && !gov.status().active);
        // A 10 % cut: shed at once, said as a warning; the next tick is within the budget.
        let budget = 0.9 * f0;
        let (out, _) = tick(&mut gov, &mut caps, budget, 1.0, false);
        assert!(!out.power_limits.is_empty() && out.notices.iter().any(|x| x.warning));
        let (_, f) = tick(&mut gov, &mut caps, budget, 2.0, false);
        let target = budget * (1.0 - GovernorConfig::default().margin_frac);
        assert!(f <= target + 1.0, "facility {f} kW over the target of {target} kW");
        assert!(f >= budget * (1.0 - 0.02), "shed too much: {f} kW for {budget} kW");
        // A half-used GPU loses half the work per ratio of power on a smaller demand: u·s₁/d is
        // lower, so every one of them is cut to its knee before any fully used GPU leaves the
        // shallow part of its curve.
        let knee = site.gpu.perf_knee.unwrap()[1];
        let d_half = site.gpu.power_and_speed(70.0, 0.5, site.gpu.tdp_w).0;
        for (i, &c) in caps.iter().enumerate() {
            if i % 4 == 3 {
                assert!(
                    (c as f64 - knee * d_half).abs() < 2.0,
                    "GPU {i}: {c} W, knee at {} W",
                    knee * d_half
                );
            } else {
                assert!(c as f64 >= knee * site.gpu.tdp_w - 2.0, "GPU {i}: {c} W below its knee");
            }
        }
        let st = gov.status();
        assert!(st.active && st.gpus_capped > 0 && st.work_lost_pct > 0.0, "{st:?}");
        // A stale meter holds the caps (none raised) and says so once.
        let before = caps.clone();
        let (out, _) = tick(&mut gov, &mut caps, 1e6, 3.0, true);
        assert!(out.power_limits.is_empty() && out.notices.iter().any(|x| x.warning && x.message.contains("stale")));
        let (out, _) = tick(&mut gov, &mut caps, 1e6, 4.0, true);
        assert!(out.notices.is_empty());
        assert_eq!(before, caps);
        // The cut ends: the caps are lifted within a few ticks, and it is said.
        let mut lifted = false;
        for k in 0..20 {
            let (out, _) = tick(&mut gov, &mut caps, 1e6, 5.0 + k as f64, false);
            lifted |= out.notices.iter().any(|x| x.message.contains("lifted"));
        }
        assert!(lifted && caps.iter().all(|&c| c == site.gpu.tdp_w as f32) && !gov.status().active);
    }

    /// Brute force over a grid of caps for three GPUs.
    fn brute(gpu: &GpuModel, min_cap: f64, g: &[GpuDemand], shed: f64) -> f64 {
        let steps = 120;
        let mut best = f64::INFINITY;
        let lo: Vec<f64> = g.iter().map(|x| (x.demand_w - min_cap).max(0.0)).collect();
        for a in 0..=steps {
            for b in 0..=steps {
                let ca = lo[0] * a as f64 / steps as f64;
                let cb = lo[1] * b as f64 / steps as f64;
                let cc = shed - ca - cb;
                if cc < -1e-9 || cc > lo[2] + 1e-9 {
                    continue;
                }
                let loss: f64 = [ca, cb, cc.max(0.0)]
                    .iter()
                    .zip(g)
                    .map(|(c, x)| x.util * (1.0 - gpu.perf_at_power_ratio((x.demand_w - c) / x.demand_w)))
                    .sum();
                best = best.min(loss);
            }
        }
        best
    }

    #[test]
    fn a_chiller_start_is_answered_on_the_tick_it_is_metered() {
        use coolplane_core::signals::FacilityMeasurement;
        let site = site();
        let topo = Topology::new(&site);
        let limits = PlantLimits::from_site(&site, &topo);
        let current = limits.design_setpoints();
        let n = topo.gpu_count;
        let caps = vec![site.gpu.tdp_w as f32; n];
        let cfg = GovernorConfig::default();
        // Facility pumps 40 kW, fans 20 kW, the chiller as given (its reading bad unless `ok`).
        let facility = |t: f64, chiller_kw: f64, ok: bool| {
            let mut f = FacilityMeasurement {
                pump_power_kw: Reading::good(40.0, t),
                fan_power_kw: Reading::good(20.0, t),
                chiller_power_kw: Reading::good(chiller_kw, t),
                ..Default::default()
            };
            if !ok {
                f.chiller_power_kw.quality = coolplane_core::signals::Quality::Bad;
            }
            f
        };
        let f0 = image(n, &caps, 0.0, 0.0, 1.5e6).meter.facility_power_kw.value;
        // The budget leaves 50 kW under the loop's target; a chiller stage then adds 100 kW.
        let budget = (f0 + 50.0) / (1.0 - cfg.margin_frac);
        let run = |chiller_metered: bool| {
            let mut gov = BudgetGovernor::new(&site.gpu, &topo, cfg);
            let mut shed_at_step = false;
            for k in 0..40 {
                let t = k as f64;
                let step = k == 30;
                let chiller_kw = if k >= 30 { 100.0 } else { 0.0 };
                let mut m = image(n, &caps, budget, t, 1.5e6);
                m.meter.facility_power_kw.value += chiller_kw;
                m.facilities = vec![facility(t, chiller_kw, chiller_metered)];
                let out = gov.tick(&PolicyInput {
                    now_s: t,
                    image: &m,
                    limits: &limits,
                    topology: &topo,
                    current: &current,
                });
                if k < 30 {
                    assert!(out.power_limits.is_empty(), "tick {k}: capped within the budget");
                }
                if step {
                    shed_at_step = !out.power_limits.is_empty() && gov.status().shed_kw >= 50.0 - 1.0;
                }
            }
            shed_at_step
        };
        // Read from the chiller's meter, the step is shed on the tick it appears.
        assert!(run(true), "the metered chiller start was not answered at once");
        // A cooling reading that goes bad (the chiller still drawing 100 kW) does not step the
        // estimate down: the smoothed part takes it over; nor up when it comes back.
        let mut gov = BudgetGovernor::new(&site.gpu, &topo, cfg);
        let mut last = f64::NAN;
        for k in 0..40 {
            let t = k as f64;
            let mut m = image(n, &caps, 1e6, t, 1.5e6);
            m.meter.facility_power_kw.value += 100.0;
            m.facilities = vec![facility(t, 100.0, !(30..35).contains(&k))];
            gov.tick(&PolicyInput {
                now_s: t,
                image: &m,
                limits: &limits,
                topology: &topo,
                current: &current,
            });
            let est = gov.status().facility_kw;
            if k >= 20 {
                assert!((est - last).abs() < 1.0, "tick {k}: estimate stepped {last} → {est} kW");
            }
            last = est;
        }
        // Seen only through the smoothed utility-meter residual (the chiller's reading bad), the
        // same step is not: what the loop did before the cooling was taken as metered.
        assert!(
            !run(false),
            "the smoothed overhead answered a 100 kW step within a second"
        );
    }

    #[test]
    fn the_greedy_shed_loses_no_more_work_than_any_other_split() {
        let s = site();
        let gpu = &s.gpu;
        let cases = [
            [(1000.0, 1.0), (700.0, 0.6), (560.0, 0.5)],
            [(990.0, 0.98), (1000.0, 1.0), (450.0, 0.35)],
            [(800.0, 0.75), (650.0, 0.55), (900.0, 0.9)],
        ];
        for case in cases {
            let g: Vec<GpuDemand> = case.iter().map(|&(d, u)| GpuDemand { demand_w: d, util: u }).collect();
            for shed in [50.0, 200.0, 400.0, 700.0] {
                let (cut, lost) = least_loss_shed(gpu, gpu.min_cap_w, &g, shed);
                let total: f64 = cut.iter().sum();
                assert!((total - shed).abs() < 1e-6, "shed {shed}: cut {total}");
                let direct: f64 = cut
                    .iter()
                    .zip(&g)
                    .map(|(c, x)| x.util * (1.0 - gpu.perf_at_power_ratio((x.demand_w - c) / x.demand_w)))
                    .sum();
                assert!((direct - lost).abs() < 1e-9, "reported loss {lost} vs {direct}");
                let b = brute(gpu, gpu.min_cap_w, &g, shed);
                // Exact but for the marginal level, whose slopes may differ by TIE_FRAC.
                assert!(
                    lost <= b * (1.0 + TIE_FRAC) + 1e-6,
                    "{case:?} shed {shed}: greedy {lost} > brute force {b}"
                );
            }
        }
        // More than the GPUs can give above their lowest caps: all of it, no more.
        let g = [GpuDemand {
            demand_w: 900.0,
            util: 1.0,
        }];
        let (cut, _) = least_loss_shed(gpu, gpu.min_cap_w, &g, 5_000.0);
        assert!((cut[0] - 500.0).abs() < 1e-9);
    }

    #[test]
    fn a_watt_is_taken_first_where_it_buys_least_work() {
        let s = site();
        let gpu = &s.gpu;
        // A busy GPU far above its knee gives its watts before one already at the knee.
        let knee = gpu.perf_knee.unwrap()[1];
        let g = [
            GpuDemand {
                demand_w: 1000.0,
                util: 1.0,
            },
            GpuDemand {
                demand_w: 1000.0 * knee / 0.99,
                util: 1.0,
            },
        ];
        let (cut, _) = least_loss_shed(gpu, gpu.min_cap_w, &g, 100.0);
        assert!(cut[0] > 99.9 && cut[1] < 0.1, "{cut:?}");
        // Equal GPUs share the cut evenly.
        let g = vec![
            GpuDemand {
                demand_w: 1000.0,
                util: 1.0
            };
            8
        ];
        let (cut, _) = least_loss_shed(gpu, gpu.min_cap_w, &g, 400.0);
        assert!(cut.iter().all(|c| (c - 50.0).abs() < 1e-6), "{cut:?}");
    }
}
