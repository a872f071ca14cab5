//! The ledger's inputs and outputs against the process image: staleness of every domain's
//! telemetry, the contract limit the site meter reports, the cooling limit of each CDU, the
//! unmanaged load, and the per-GPU power caps the leases ask for.
//!
//! Cooling headroom is a seam ([`CoolingHeadroom`]): today [`ProcessImageCooling`] derives it from
//! the CDUs' nameplate capacity and their alarms; the twin's thermal margin (now and over the
//! forecast horizon) will implement the same trait.
//!
//! Pure code: no IO, no clock (time is an argument).

use crate::ledger::{DomainId, Ledger};
use coolplane_core::signals::{cdu_alarm, Measurements, RackPowerLimits};
use coolplane_core::site::Site;
use coolplane_core::topology::Topology;
use serde::{Deserialize, Serialize};

/// What the caps of GPUs no lease holds are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Unleased {
    /// Capped at the floor (device minimum): every watt above it needs a lease. Strict.
    #[default]
    Floor,
    /// Left alone (no cap is written); their measured draw above the floor is unmanaged load.
    Observe,
}

/// Tuning of the budget feed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    /// A reading older than this is stale, s.
    pub stale_after_s: f64,
    /// Margin kept free at the site for overhead that grows with the load, fraction of the limit.
    pub site_margin_frac: f64,
    /// Caps of unleased GPUs.
    pub unleased: Unleased,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            stale_after_s: 180.0,
            site_margin_frac: 0.03,
            unleased: Unleased::Floor,
        }
    }
}

/// The cooling path's limit on a CDU, in watts of IT load (`None`: no cooling limit).
pub trait CoolingHeadroom {
    /// Limit of CDU `cdu` now. `load_w` is what the ledger holds on the CDU's domain now
    /// (baseline, unmanaged and granted), `stale_after_s` the age beyond which a reading is stale.
    fn cdu_limit_w(&self, cdu: usize, image: &Measurements, now_s: f64, load_w: f64, stale_after_s: f64)
        -> Option<f64>;
}

/// A struggling CDU whose GPUs are all at least this far below slowdown is held (no new heat,
/// none taken away); within it, or with a rack's GPU temperatures stale, it is cut to the heat it
/// moves now, K (the plant's near-throttle band).
pub const COOLING_CLAMP_MARGIN_K: f64 = 5.0;

/// Cooling headroom from the process image: the CDU's nameplate capacity (as IT watts, divided by
/// the heat-to-liquid fraction). A CDU that reports it cannot hold its supply temperature (high
/// supply temperature, saturated valve, pump fault) or runs on its local fallback is *held*
/// while every one of its racks' hottest GPUs reads at least [`COOLING_CLAMP_MARGIN_K`] below
/// slowdown: its limit is what the ledger holds on it now, so nothing new is granted there and
/// nothing is taken away. When one of its GPUs nears slowdown, or a rack's GPU temperatures are
/// stale (fail closed), its limit is the heat it moves now, and the ledger sheds down to it: the
/// heat it reports, else the same from its flow and temperatures, else (never read) it stays held
/// where the ledger stands; a struggling CDU never gets its nameplate back.
/// (Cutting a struggling CDU to the heat of the moment regardless preempted nearly every job of
/// hall-10k in a heat wave, whose GPUs were at 74 °C, 13 K below slowdown: `RESULTS.md`, "Work
/// thrown away by preemption".)
#[derive(Debug, Clone)]
pub struct ProcessImageCooling {
    rated_w: Vec<f64>,
    heat_to_liquid: Vec<f64>,
    /// Racks of each CDU.
    racks: Vec<Vec<usize>>,
    /// GPU slowdown temperature, °C.
    slowdown_c: f64,
}

impl ProcessImageCooling {
    /// From the site file.
    pub fn new(site: &Site, topo: &Topology) -> Self {
        let spec = |c: &coolplane_core::topology::CduNode| topo.hall_spec(site, c.hall);
        let mut racks = vec![Vec::new(); topo.cdus.len()];
        for (r, rack) in topo.racks.iter().enumerate() {
            if let Some(v) = racks.get_mut(rack.cdu) {
                v.push(r);
            }
        }
        Self {
            rated_w: topo
                .cdus
                .iter()
                .map(|c| spec(c).cdu.capacity_kw * 1e3 / spec(c).rack.heat_to_liquid.max(0.01))
                .collect(),
            heat_to_liquid: topo
                .cdus
                .iter()
                .map(|c| spec(c).rack.heat_to_liquid.max(0.01))
                .collect(),
            racks,
            slowdown_c: site.gpu.slowdown_c,
        }
    }

    /// Whether every rack of CDU `cdu` reads its hottest GPU, fresh, at least
    /// [`COOLING_CLAMP_MARGIN_K`] below slowdown.
    fn gpus_clear(&self, cdu: usize, image: &Measurements, now_s: f64, stale_after_s: f64) -> bool {
        let Some(racks) = self.racks.get(cdu) else {
            return false;
        };
        !racks.is_empty()
            && racks.iter().all(|&r| {
                image.racks.get(r).is_some_and(|m| {
                    m.gpu_temp_max_c.usable(now_s, stale_after_s)
                        && m.gpu_temp_max_c.value < self.slowdown_c - COOLING_CLAMP_MARGIN_K
                })
            })
    }
}

impl CoolingHeadroom for ProcessImageCooling {
    fn cdu_limit_w(
        &self,
        cdu: usize,
        image: &Measurements,
        now_s: f64,
        load_w: f64,
        stale_after_s: f64,
    ) -> Option<f64> {
        let rated = *self.rated_w.get(cdu)?;
        let m = image.cdus.get(cdu)?;
        let struggling = m.alarms & (cdu_alarm::HIGH_SUPPLY_TEMP | cdu_alarm::VALVE_SATURATED | cdu_alarm::PUMP_FAULT)
            != 0
            || m.local_fallback;
        if !struggling {
            return Some(rated);
        }
        if self.gpus_clear(cdu, image, now_s, stale_after_s) && load_w.is_finite() {
            return Some(load_w.clamp(0.0, rated));
        }
        let liquid_kw = cut_heat_kw(m);
        if liquid_kw.is_finite() {
            Some((liquid_kw * 1e3 / self.heat_to_liquid[cdu]).clamp(0.0, rated))
        } else {
            // Neither the heat nor the loop's flow and temperatures were ever read: nothing new
            // is granted (fail closed), nothing taken on a guess.
            Some(if load_w.is_finite() {
                load_w.clamp(0.0, rated)
            } else {
                0.0
            })
        }
    }
}

/// The heat a struggling CDU moves now, for cutting it, kW: the heat it reports (its last good
/// value where the last read failed); where that is not a number (never read, or a sensor
/// sentinel), the same from its secondary flow and temperatures (mass flow × c_p × (return −
/// supply), the CDU's own formula), each at its last good value; NaN where neither can be had.
fn cut_heat_kw(m: &coolplane_core::signals::CduMeasurement) -> f64 {
    use coolplane_core::fluid::{pg25_lpm_to_kg_s, PG25_CP_J_KG_K};
    if m.heat_kw.value.is_finite() {
        return m.heat_kw.value;
    }
    let (q, ts, tr) = (m.flow_lpm.value, m.supply_temp_c.value, m.return_temp_c.value);
    if q.is_finite() && ts.is_finite() && tr.is_finite() {
        (pg25_lpm_to_kg_s(q.max(0.0)) * PG25_CP_J_KG_K * (tr - ts) / 1e3).max(0.0)
    } else {
        f64::NAN
    }
}

/// Feeds the ledger from the process image and turns its leases into GPU caps.
#[derive(Debug, Clone)]
pub struct BudgetFeed {
    cfg: BudgetConfig,
    topo: Topology,
    nodes_per_rack: Vec<u32>,
    gpus_per_node: Vec<u32>,
    node_factor: Vec<f64>,
    misc_w: f64,
    sent: Vec<Vec<f32>>,
}

/// Ledger domain ids of a topology, in the order [`Ledger::new`] creates them.
fn hall_id(h: usize) -> DomainId {
    1 + h
}

impl BudgetFeed {
    /// For a site.
    pub fn new(site: &Site, topo: &Topology, cfg: BudgetConfig) -> Self {
        let spec = |r: &coolplane_core::topology::RackNode| topo.hall_spec(site, r.hall);
        Self {
            cfg,
            nodes_per_rack: topo.racks.iter().map(|r| spec(r).rack.nodes_per_rack).collect(),
            gpus_per_node: topo.racks.iter().map(|r| spec(r).rack.gpus_per_node).collect(),
            node_factor: topo
                .racks
                .iter()
                .map(|r| 1.0 + spec(r).rack.node_overhead_frac)
                .collect(),
            misc_w: site.site.misc_load_kw * 1e3,
            sent: topo.racks.iter().map(|_| Vec::new()).collect(),
            topo: topo.clone(),
        }
    }

    /// Configuration.
    pub fn config(&self) -> &BudgetConfig {
        &self.cfg
    }

    /// Update the ledger from the image at `now_s` and advance it (expiry, enforcement, regrowth).
    /// `leased`: per GPU, whether a lease holds it (see [`gpu_caps`]).
    pub fn feed(
        &self,
        ledger: &mut Ledger,
        image: &Measurements,
        cooling: &dyn CoolingHeadroom,
        leased: &[bool],
        now_s: f64,
    ) {
        let st = self.cfg.stale_after_s;
        let t = &self.topo;
        let cdu0 = 1 + t.halls.len();
        let rack0 = cdu0 + t.cdus.len();
        // Staleness.
        let meter_ok = image.meter.facility_power_kw.usable(now_s, st) && image.meter.it_power_kw.usable(now_s, st);
        let _ = ledger.set_stale(0, !meter_ok, now_s);
        for h in 0..t.halls.len() {
            let ok = image
                .facilities
                .get(h)
                .is_some_and(|f| f.supply_temp_c.usable(now_s, st));
            let _ = ledger.set_stale(hall_id(h), !ok, now_s);
        }
        for c in 0..t.cdus.len() {
            let ok = image
                .cdus
                .get(c)
                .is_some_and(|m| m.supply_temp_c.usable(now_s, st) && m.flow_lpm.usable(now_s, st));
            let _ = ledger.set_stale(cdu0 + c, !ok, now_s);
            let load_w = ledger.domains().get(cdu0 + c).map_or(f64::NAN, |d| d.load_w());
            let _ = ledger.set_cooling(cdu0 + c, cooling.cdu_limit_w(c, image, now_s, load_w, st), now_s);
            if let Some(m) = image.cdus.get(c) {
                ledger.set_observed(cdu0 + c, Some(m.heat_kw.value * 1e3));
            }
        }
        let gpu_fresh = image.gpus.power_w.len() == t.gpu_count && now_s - image.gpus.t_s <= st;
        let mut node_id = rack0 + t.racks.len();
        let floor = ledger.floor_w() as f32;
        let mut rack_unmanaged = vec![0.0f64; t.racks.len()];
        for (r, rack) in t.racks.iter().enumerate() {
            let m = image.racks.get(r);
            let ok = gpu_fresh && m.is_some_and(|m| m.it_power_kw.usable(now_s, st));
            let _ = ledger.set_stale(rack0 + r, !ok, now_s);
            ledger.set_observed(rack0 + r, m.map(|m| m.it_power_kw.value * 1e3));
            let gpn = self.gpus_per_node[r] as usize;
            for n in 0..self.nodes_per_rack[r] as usize {
                let g0 = rack.gpus.start + n * gpn;
                let mut excess = 0.0f64;
                if self.cfg.unleased == Unleased::Observe && gpu_fresh {
                    for g in g0..g0 + gpn {
                        if !leased.get(g).copied().unwrap_or(false) {
                            excess += (image.gpus.power_w[g] - floor).max(0.0) as f64;
                        }
                    }
                }
                excess *= self.node_factor[r];
                rack_unmanaged[r] += excess;
                let _ = ledger.set_stale(node_id, !ok, now_s);
                let _ = ledger.set_unmanaged(node_id, excess, now_s);
                node_id += 1;
            }
            let _ = ledger.set_unmanaged(rack0 + r, rack_unmanaged[r], now_s);
        }
        let mut cdu_un = vec![0.0f64; t.cdus.len()];
        let mut hall_un = vec![0.0f64; t.halls.len()];
        for (r, rack) in t.racks.iter().enumerate() {
            cdu_un[rack.cdu] += rack_unmanaged[r];
            hall_un[rack.hall] += rack_unmanaged[r];
        }
        for (c, w) in cdu_un.iter().enumerate() {
            let _ = ledger.set_unmanaged(cdu0 + c, *w, now_s);
        }
        for (h, w) in hall_un.iter().enumerate() {
            let _ = ledger.set_unmanaged(hall_id(h), *w, now_s);
        }
        // Site: contract from the meter, overhead (cooling, losses, misc) as measured, a margin.
        let budget = &image.meter.power_budget_kw;
        if budget.usable(now_s, st) && budget.value > 0.0 {
            let _ = ledger.set_contract(0, Some(budget.value * 1e3), now_s);
        }
        let overhead = if meter_ok {
            (image.meter.facility_power_kw.value - image.meter.it_power_kw.value).max(0.0) * 1e3
        } else {
            self.misc_w
        };
        let limit = ledger.domains()[0].limit().0;
        let margin = if limit.is_finite() {
            limit * self.cfg.site_margin_frac
        } else {
            0.0
        };
        let site_un = hall_un.iter().sum::<f64>() + overhead.max(self.misc_w) + margin;
        let _ = ledger.set_unmanaged(0, site_un, now_s);
        ledger.set_observed(0, meter_ok.then_some(image.meter.facility_power_kw.value * 1e3));
        ledger.tick(now_s);
    }

    /// Power-limit commands for the racks whose caps changed since the last call (`caps` from
    /// [`BudgetFeed::caps`]).
    pub fn changed_limits(&mut self, caps: &[f32]) -> Vec<RackPowerLimits> {
        let mut out = Vec::new();
        for (r, rack) in self.topo.racks.iter().enumerate() {
            let Some(new) = caps.get(rack.gpus.clone()).map(|c| c.to_vec()) else {
                continue;
            };
            if self.sent[r] != new {
                out.push(RackPowerLimits {
                    rack: r as u32,
                    limits_w: new.clone(),
                });
            }
            self.sent[r] = new;
        }
        out
    }

    /// Per GPU: whether a lease holds it, filling each node's GPUs in lease order
    /// (see [`gpu_caps`]).
    pub fn leased_gpus(&self, ledger: &Ledger) -> Vec<bool> {
        let caps = gpu_caps(ledger, &self.topo, &self.nodes_per_rack, &self.gpus_per_node, f32::NAN);
        caps.iter().map(|c| !c.is_nan()).collect()
    }

    /// Per GPU cap: the grant of the lease holding it; unleased GPUs at the floor
    /// ([`Unleased::Floor`]) or at TDP, i.e. uncapped ([`Unleased::Observe`]). When a lease ends,
    /// its GPUs go back to this value.
    pub fn caps(&self, ledger: &Ledger) -> Vec<f32> {
        let unleased = match self.cfg.unleased {
            Unleased::Floor => ledger.floor_w() as f32,
            Unleased::Observe => ledger.tdp_w() as f32,
        };
        gpu_caps(ledger, &self.topo, &self.nodes_per_rack, &self.gpus_per_node, unleased)
    }
}

/// Per-GPU caps from the live leases. A lease names nodes and a GPU count on each; the GPUs of a
/// node are given to its leases in lease-id order (the ledger accounts GPUs by count, so the sum
/// of the caps on a node equals what the ledger accounts there whatever the order).
fn gpu_caps(ledger: &Ledger, topo: &Topology, npr: &[u32], gpn: &[u32], unleased: f32) -> Vec<f32> {
    let mut caps = vec![unleased; topo.gpu_count];
    let mut used: std::collections::HashMap<DomainId, u32> = std::collections::HashMap::new();
    // Node domain → first GPU index.
    let first_node = ledger.node_domain(0).unwrap_or(usize::MAX);
    let mut node_gpu0 = Vec::with_capacity(ledger.node_count());
    for (r, rack) in topo.racks.iter().enumerate() {
        for n in 0..npr[r] as usize {
            node_gpu0.push(rack.gpus.start + n * gpn[r] as usize);
        }
    }
    for l in ledger.leases() {
        for s in &l.request.nodes {
            let Some(&g0) = s.node.checked_sub(first_node).and_then(|i| node_gpu0.get(i)) else {
                continue;
            };
            let u = used.entry(s.node).or_default();
            for k in 0..s.gpus {
                if let Some(c) = caps.get_mut(g0 + (*u + k) as usize) {
                    *c = l.granted_w as f32;
                }
            }
            *u += s.gpus;
        }
    }
    caps
}

/// Merge the controller's power-limit commands (safety envelope, thermal guard) with the ledger's:
/// per GPU the lower of the two wins (arbitration: the safety envelope narrows, the scheduler's
/// allocations narrow further). `ctl_last` keeps the controller's last limits per rack (empty: none).
pub fn merge_limits(
    ctl: &[RackPowerLimits],
    ledger_caps: &[f32],
    topo: &Topology,
    ctl_last: &mut [Vec<f32>],
    ledger_changed: &[RackPowerLimits],
) -> Vec<RackPowerLimits> {
    let mut racks: Vec<u32> = ctl.iter().chain(ledger_changed).map(|p| p.rack).collect();
    racks.sort_unstable();
    racks.dedup();
    for p in ctl {
        if let Some(l) = ctl_last.get_mut(p.rack as usize) {
            *l = p.limits_w.clone();
        }
    }
    racks
        .into_iter()
        .filter_map(|r| {
            let rack = topo.racks.get(r as usize)?;
            let c = &ctl_last[r as usize];
            let limits_w = rack
                .gpus
                .clone()
                .enumerate()
                .map(|(i, g)| {
                    let a = c.get(i).copied().unwrap_or(f32::NAN);
                    let b = ledger_caps.get(g).copied().unwrap_or(f32::NAN);
                    match (a.is_nan(), b.is_nan()) {
                        (true, true) => f32::NAN,
                        (true, false) => b,
                        (false, true) => a,
                        (false, false) => a.min(b),
                    }
                })
                .collect::<Vec<f32>>();
            limits_w
                .iter()
                .any(|x| !x.is_nan())
                .then_some(RackPowerLimits { rack: r, limits_w })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use coolplane_core::signals::{CduMeasurement, RackMeasurement, Reading};
    use coolplane_core::site::builtin_site;

    /// hall-10k's image at `t`: every CDU moving `heat_kw` with `alarms`, every rack's hottest
    /// GPU at `gpu_c`, read at `t`.
    fn image(topo: &Topology, t: f64, heat_kw: f64, alarms: u16, gpu_c: f64) -> Measurements {
        Measurements {
            t_s: t,
            cdus: vec![
                CduMeasurement {
                    heat_kw: Reading::good(heat_kw, t),
                    alarms,
                    ..Default::default()
                };
                topo.cdus.len()
            ],
            racks: vec![
                RackMeasurement {
                    gpu_temp_max_c: Reading::good(gpu_c, t),
                    ..Default::default()
                };
                topo.racks.len()
            ],
            ..Default::default()
        }
    }

    /// hall-10k's topology and cooling headroom, its racks' heat-to-liquid fraction, a CDU's
    /// nameplate in IT watts and the GPUs' slowdown temperature.
    fn hall() -> (Topology, ProcessImageCooling, f64, f64, f64) {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let cool = ProcessImageCooling::new(&site, &topo);
        let htl = site.halls[0].rack.heat_to_liquid;
        let rated = site.halls[0].cdu.capacity_kw * 1e3 / htl;
        (topo, cool, htl, rated, site.gpu.slowdown_c)
    }

    /// A CDU that holds its supply has its nameplate; one that struggles while its GPUs are well
    /// below slowdown is held at what the ledger holds on it (nothing new, nothing taken); one
    /// that struggles with a GPU near slowdown, or with a rack's GPU temperatures stale, is cut to
    /// the heat it moves now (fail closed).
    #[test]
    fn a_struggling_cdu_is_held_while_its_gpus_are_clear_and_cut_when_one_nears_slowdown() {
        let (topo, cool, htl, rated, slow) = hall();
        let (t, load, stale) = (1000.0, 900e3, 180.0);
        let limit = |m: &Measurements, load: f64| cool.cdu_limit_w(0, m, t, load, stale).unwrap();
        // Holding its supply: the nameplate, whatever the load.
        assert_eq!(limit(&image(&topo, t, 700.0, 0, slow - 20.0), load), rated);
        // Struggling, GPUs 10 K clear of slowdown: held where the ledger stands.
        for alarm in [
            cdu_alarm::VALVE_SATURATED,
            cdu_alarm::HIGH_SUPPLY_TEMP,
            cdu_alarm::PUMP_FAULT,
        ] {
            assert_eq!(limit(&image(&topo, t, 700.0, alarm, slow - 10.0), load), load);
        }
        // ... and no more than the nameplate.
        assert_eq!(
            limit(
                &image(&topo, t, 700.0, cdu_alarm::VALVE_SATURATED, slow - 10.0),
                2.0 * rated
            ),
            rated
        );
        // Struggling with a GPU within the margin of slowdown: the heat it moves now.
        let cut = 700e3 / htl;
        let near = image(
            &topo,
            t,
            700.0,
            cdu_alarm::VALVE_SATURATED,
            slow - COOLING_CLAMP_MARGIN_K + 0.5,
        );
        assert!((limit(&near, load) - cut).abs() < 1e-6);
        // Only the CDU's own racks count: a hot rack on CDU 1 leaves CDU 0 held.
        let mut other = image(&topo, t, 700.0, cdu_alarm::VALVE_SATURATED, slow - 10.0);
        let r1 = topo.racks.iter().position(|r| r.cdu == 1).unwrap();
        other.racks[r1].gpu_temp_max_c = Reading::good(slow - 1.0, t);
        assert_eq!(limit(&other, load), load);
        assert!((cool.cdu_limit_w(1, &other, t, load, stale).unwrap() - cut).abs() < 1e-6);
        // A rack of the CDU with stale GPU temperatures: cut, as if near.
        let mut old = image(&topo, t, 700.0, cdu_alarm::VALVE_SATURATED, slow - 10.0);
        let r0 = topo.racks.iter().position(|r| r.cdu == 0).unwrap();
        old.racks[r0].gpu_temp_max_c = Reading::good(slow - 10.0, t - stale - 1.0);
        assert!((limit(&old, load) - cut).abs() < 1e-6);
        // On its local fallback (the supervisor lost), the same rule.
        let mut fb = image(&topo, t, 700.0, 0, slow - 10.0);
        fb.cdus[0].local_fallback = true;
        assert_eq!(limit(&fb, load), load);
    }

    /// A struggling CDU near slowdown whose heat reading is not a number (never read, or a sensor
    /// sentinel) is cut to the heat its own flow and temperatures give; with those unread too it
    /// is held where the ledger stands; never its nameplate (fail closed). A failed read keeps the
    /// last good heat.
    #[test]
    fn a_struggling_cdu_without_a_heat_reading_is_cut_from_its_flow_or_held_never_rated() {
        let (topo, cool, htl, rated, slow) = hall();
        let (t, load, stale) = (1000.0, 900e3, 180.0);
        let near = slow - 1.0;
        let mut m = image(&topo, t, f64::NAN, cdu_alarm::HIGH_SUPPLY_TEMP, near);
        // Flow 1,000 L/min of PG25, 32 -> 42 °C: 1000/60000 × 1020 × 3950 × 10 / 1000 = 671.5 kW.
        m.cdus[0].flow_lpm = Reading::good(1000.0, t);
        m.cdus[0].supply_temp_c = Reading::good(32.0, t);
        m.cdus[0].return_temp_c = Reading::good(42.0, t);
        let from_flow = 1000.0 / 60_000.0 * 1020.0 * 3950.0 * 10.0 / htl;
        let got = cool.cdu_limit_w(0, &m, t, load, stale).unwrap();
        assert!((got - from_flow).abs() < 1e-6, "{got} vs {from_flow}");
        assert!(got < rated);
        // The flow unread as well (the image's value for a point never read): held.
        m.cdus[0].flow_lpm = Reading {
            value: f64::NAN,
            t_s: f64::NEG_INFINITY,
            quality: coolplane_core::signals::Quality::Bad,
        };
        assert_eq!(cool.cdu_limit_w(0, &m, t, load, stale), Some(load));
        assert_eq!(cool.cdu_limit_w(0, &m, t, f64::NAN, stale), Some(0.0));
        // A heat read that failed keeps its last good value: that value cuts it.
        let mut bad = image(&topo, t, 500.0, cdu_alarm::PUMP_FAULT, near);
        bad.cdus[0].heat_kw.quality = coolplane_core::signals::Quality::Bad;
        let got = cool.cdu_limit_w(0, &bad, t, load, stale).unwrap();
        assert!((got - 500e3 / htl).abs() < 1e-6);
    }
}
