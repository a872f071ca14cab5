//! The operator's view of one tick: site, hall, CDU and rack state with per-rack GPU summaries,
//! computed from the process image the controller saw.
//!
//! One snapshot feeds the history (line protocol, [`crate::history`]), the live web page
//! ([`crate::web`]) and the Prometheus gauges ([`crate::metrics`]), so the three always agree.
//! A value that is stale or bad in the image is `None` here: it is never shown as if fresh.

use coolplane_core::signals::{Measurements, Reading};
use coolplane_core::topology::Topology;
use serde::Serialize;

/// Site-level state.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SiteState {
    /// Site name.
    pub name: String,
    /// Utility meter over IT power (the project's PUE boundary).
    pub pue: Option<f64>,
    /// Utility-meter power, kW.
    pub facility_kw: Option<f64>,
    /// IT power at rack input, kW.
    pub it_kw: Option<f64>,
    /// Cooling power (CDU pumps, facility pumps, fans, chillers), kW.
    pub cooling_kw: Option<f64>,
    /// Heat-reuse heat pumps (inside the facility power, not cooling), kW; `None` where no hall
    /// reports one.
    pub heat_pump_kw: Option<f64>,
    /// Losses and the rest (facility − IT − cooling − heat pumps: transformer, UPS, PDU, misc), kW.
    pub loss_kw: Option<f64>,
    /// Site power budget in force, kW.
    pub budget_kw: Option<f64>,
    /// Budget minus facility power, kW.
    pub headroom_kw: Option<f64>,
    /// Hottest GPU die reported (fresh racks), °C.
    pub hottest_gpu_c: Option<f64>,
    /// GPU slowdown limit, °C.
    pub slowdown_c: f64,
    /// Slowdown limit minus the hottest die, K.
    pub hottest_margin_k: Option<f64>,
    /// Racks with fresh telemetry.
    pub racks_fresh: usize,
    /// Racks in all.
    pub racks: usize,
}

/// One hall.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct HallState {
    /// Hall name.
    pub name: String,
    /// IT power of its racks (fresh racks only), kW.
    pub it_kw: Option<f64>,
    /// Cooling power of the hall (its CDU pumps, facility pumps, fans, chiller), kW.
    pub cooling_kw: Option<f64>,
    /// Facility water supply, °C.
    pub supply_c: Option<f64>,
    /// Facility water return, °C.
    pub return_c: Option<f64>,
    /// Facility water flow, L/min.
    pub flow_lpm: Option<f64>,
    /// Heat-reuse heat pump drawing on the facility return water, kW (`None`: none reported).
    pub heat_pump_kw: Option<f64>,
    /// Smallest GPU margin in the hall, K.
    pub hottest_margin_k: Option<f64>,
}

/// One CDU.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CduState {
    /// CDU name.
    pub name: String,
    /// Hall name.
    pub hall: String,
    /// Secondary supply, °C.
    pub supply_c: Option<f64>,
    /// Secondary return, °C.
    pub return_c: Option<f64>,
    /// Secondary flow, L/min.
    pub flow_lpm: Option<f64>,
    /// Heat to facility water, kW.
    pub heat_kw: Option<f64>,
    /// Pump power, kW.
    pub pump_kw: Option<f64>,
    /// Supply setpoint in force, °C.
    pub supply_setpoint_c: Option<f64>,
    /// Age of its newest reading, s (None: never read).
    pub age_s: Option<f64>,
    /// Readings younger than the staleness limit and not bad.
    pub fresh: bool,
    /// Alarm bits.
    pub alarms: u16,
    /// Running on local defaults after a BMS timeout.
    pub local_fallback: bool,
    /// Smallest GPU margin among its racks, K.
    pub hottest_margin_k: Option<f64>,
}

/// One rack with its GPU summary.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RackState {
    /// Rack name.
    pub name: String,
    /// CDU name.
    pub cdu: String,
    /// Rack input power, kW.
    pub it_kw: Option<f64>,
    /// Coolant inlet, °C.
    pub inlet_c: Option<f64>,
    /// Coolant outlet, °C.
    pub outlet_c: Option<f64>,
    /// Hottest die, °C.
    pub gpu_temp_max_c: Option<f64>,
    /// Mean die temperature, °C.
    pub gpu_temp_mean_c: Option<f64>,
    /// Smallest margin to slowdown, K.
    pub gpu_margin_min_k: Option<f64>,
    /// Sum of GPU power, W.
    pub gpu_power_w: Option<f64>,
    /// Telemetry is fresh.
    pub fresh: bool,
}

/// Everything an operator sees for one tick.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Snapshot {
    /// Plant time, s.
    pub t_s: f64,
    /// Wall-clock time of the tick, ms since the Unix epoch.
    pub unix_ms: i64,
    /// Controller mode (`Auto`, `Manual`, `Safe`).
    pub mode: String,
    /// Site.
    pub site: SiteState,
    /// Halls.
    pub halls: Vec<HallState>,
    /// CDUs.
    pub cdus: Vec<CduState>,
    /// Racks.
    pub racks: Vec<RackState>,
}

fn fresh(r: &Reading, now: f64, stale: f64) -> Option<f64> {
    r.usable(now, stale).then_some(r.value)
}

fn sum(vals: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let mut any = false;
    let mut s = 0.0;
    for v in vals.into_iter().flatten() {
        any = true;
        s += v;
    }
    any.then_some(s)
}

fn min_opt(vals: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    vals.into_iter()
        .flatten()
        .fold(None, |a, v| Some(a.map_or(v, |a: f64| a.min(v))))
}

impl Snapshot {
    /// The snapshot of image `m` at plant time `now_s` (readings older than `stale_after_s` are
    /// left out), with the controller's `mode` and the GPU `slowdown_c` limit.
    #[allow(clippy::too_many_arguments)]
    pub fn from_image(
        site: &str,
        topo: &Topology,
        m: &Measurements,
        now_s: f64,
        stale_after_s: f64,
        mode: &str,
        slowdown_c: f64,
        unix_ms: i64,
    ) -> Self {
        let f = |r: &Reading| fresh(r, now_s, stale_after_s);
        let gpus_fresh = m.gpus.t_s.is_finite() && (now_s - m.gpus.t_s) <= stale_after_s;
        let racks: Vec<RackState> = topo
            .racks
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let rm = m.racks.get(i).copied().unwrap_or_default();
                let rack_fresh = rm.gpu_temp_max_c.usable(now_s, stale_after_s);
                let range = r.gpus.start.min(m.gpus.temp_c.len())..r.gpus.end.min(m.gpus.temp_c.len());
                let temps: Vec<f64> = m.gpus.temp_c[range.clone()]
                    .iter()
                    .map(|&t| t as f64)
                    .filter(|t| t.is_finite())
                    .collect();
                let use_gpus = rack_fresh && gpus_fresh && !temps.is_empty();
                let tmax = temps.iter().copied().fold(f64::NAN, f64::max);
                let tmean = temps.iter().sum::<f64>() / temps.len().max(1) as f64;
                let pw: f64 = m
                    .gpus
                    .power_w
                    .get(range)
                    .map(|p| p.iter().map(|&x| x as f64).filter(|x| x.is_finite()).sum())
                    .unwrap_or(f64::NAN);
                let hottest = f(&rm.gpu_temp_max_c);
                RackState {
                    name: r.name.clone(),
                    cdu: topo.cdus.get(r.cdu).map(|c| c.name.clone()).unwrap_or_default(),
                    it_kw: f(&rm.it_power_kw),
                    inlet_c: f(&rm.inlet_temp_c),
                    outlet_c: f(&rm.outlet_temp_c),
                    gpu_temp_max_c: if use_gpus {
                        Some(tmax.max(hottest.unwrap_or(tmax)))
                    } else {
                        hottest
                    },
                    gpu_temp_mean_c: use_gpus.then_some(tmean),
                    gpu_margin_min_k: if use_gpus {
                        Some(slowdown_c - tmax.max(hottest.unwrap_or(tmax)))
                    } else {
                        hottest.map(|h| slowdown_c - h)
                    },
                    gpu_power_w: (use_gpus && pw.is_finite()).then_some(pw),
                    fresh: rack_fresh,
                }
            })
            .collect();
        let cdus: Vec<CduState> = topo
            .cdus
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let cm = m.cdus.get(i).cloned().unwrap_or_default();
                let newest = [cm.supply_temp_c, cm.return_temp_c, cm.flow_lpm]
                    .iter()
                    .filter(|r| r.t_s.is_finite() && r.quality != coolplane_core::signals::Quality::Bad)
                    .map(|r| r.age_s(now_s))
                    .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.min(v))));
                CduState {
                    name: c.name.clone(),
                    hall: topo.halls.get(c.hall).map(|h| h.name.clone()).unwrap_or_default(),
                    supply_c: f(&cm.supply_temp_c),
                    return_c: f(&cm.return_temp_c),
                    flow_lpm: f(&cm.flow_lpm),
                    heat_kw: f(&cm.heat_kw),
                    pump_kw: f(&cm.pump_power_kw),
                    supply_setpoint_c: f(&cm.supply_setpoint_c),
                    age_s: newest,
                    fresh: cm.supply_temp_c.usable(now_s, stale_after_s),
                    alarms: cm.alarms,
                    local_fallback: cm.local_fallback,
                    hottest_margin_k: min_opt(racks[c.racks.clone()].iter().map(|r| r.gpu_margin_min_k)),
                }
            })
            .collect();
        let halls: Vec<HallState> = topo
            .halls
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let fm = m.facilities.get(i).cloned().unwrap_or_default();
                let fac_cooling = sum([f(&fm.fan_power_kw), f(&fm.pump_power_kw), f(&fm.chiller_power_kw)]);
                let cdu_pumps = sum(cdus[h.cdus.clone()].iter().map(|c| c.pump_kw));
                HallState {
                    name: h.name.clone(),
                    it_kw: sum(racks[h.racks.clone()].iter().map(|r| r.it_kw)),
                    cooling_kw: sum([fac_cooling, cdu_pumps]),
                    supply_c: f(&fm.supply_temp_c),
                    return_c: f(&fm.return_temp_c),
                    flow_lpm: f(&fm.flow_lpm),
                    heat_pump_kw: f(&fm.heat_pump_power_kw),
                    hottest_margin_k: min_opt(racks[h.racks.clone()].iter().map(|r| r.gpu_margin_min_k)),
                }
            })
            .collect();
        let facility_kw = f(&m.meter.facility_power_kw);
        let it_kw = f(&m.meter.it_power_kw);
        let cooling_kw = sum(halls.iter().map(|h| h.cooling_kw));
        // A heat pump whose meter is mapped (it has been read) but is stale or bad now: its power
        // is unknown, and so are the losses (never folded into them).
        let heat_pump_lost = m.facilities.iter().any(|fm| {
            fm.heat_pump_power_kw.t_s != f64::NEG_INFINITY && !fm.heat_pump_power_kw.usable(now_s, stale_after_s)
        });
        let heat_pump_kw = if heat_pump_lost {
            None
        } else {
            sum(halls.iter().map(|h| h.heat_pump_kw))
        };
        let budget_kw = f(&m.meter.power_budget_kw);
        let hottest = racks
            .iter()
            .filter(|r| r.fresh)
            .filter_map(|r| r.gpu_temp_max_c)
            .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))));
        let site = SiteState {
            name: site.to_string(),
            pue: match (facility_kw, it_kw) {
                (Some(fa), Some(it)) if it > 0.0 => Some(fa / it),
                _ => None,
            },
            facility_kw,
            it_kw,
            cooling_kw,
            heat_pump_kw,
            loss_kw: match (facility_kw, it_kw, cooling_kw) {
                (Some(fa), Some(it), Some(c)) if !heat_pump_lost => Some(fa - it - c - heat_pump_kw.unwrap_or(0.0)),
                _ => None,
            },
            budget_kw,
            headroom_kw: match (budget_kw, facility_kw) {
                (Some(b), Some(fa)) => Some(b - fa),
                _ => None,
            },
            hottest_gpu_c: hottest,
            slowdown_c,
            hottest_margin_k: hottest.map(|h| slowdown_c - h),
            racks_fresh: racks.iter().filter(|r| r.fresh).count(),
            racks: racks.len(),
        };
        Snapshot {
            t_s: now_s,
            unix_ms,
            mode: mode.to_string(),
            site,
            halls,
            cdus,
            racks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coolplane_core::site::builtin_site;

    #[test]
    fn stale_values_are_absent_and_fresh_ones_add_up() {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let mut m = Measurements {
            t_s: 100.0,
            cdus: vec![Default::default(); topo.cdus.len()],
            facilities: vec![Default::default(); topo.halls.len()],
            racks: vec![Default::default(); topo.racks.len()],
            ..Default::default()
        };
        // No heat-pump meter in any hall's map (never read).
        let unmapped = Reading {
            value: f64::NAN,
            t_s: f64::NEG_INFINITY,
            quality: coolplane_core::signals::Quality::Bad,
        };
        for f in &mut m.facilities {
            f.heat_pump_power_kw = unmapped;
        }
        m.meter.facility_power_kw = Reading::good(1100.0, 99.0);
        m.meter.it_power_kw = Reading::good(1000.0, 99.0);
        // Stale: sampled 500 s ago.
        m.meter.power_budget_kw = Reading::good(2000.0, -400.0);
        m.cdus[0].pump_power_kw = Reading::good(5.0, 99.0);
        m.facilities[0].fan_power_kw = Reading::good(20.0, 99.0);
        m.racks[0].gpu_temp_max_c = Reading::good(80.0, 99.0);
        m.racks[1].gpu_temp_max_c = Reading::good(95.0, -400.0);
        let s = Snapshot::from_image("s", &topo, &m, 100.0, 30.0, "Auto", 87.0, 0);
        assert!((s.site.pue.unwrap() - 1.1).abs() < 1e-12);
        assert_eq!(s.site.budget_kw, None);
        assert_eq!(s.site.cooling_kw, Some(25.0));
        assert_eq!(s.site.loss_kw, Some(75.0));
        assert_eq!(s.site.heat_pump_kw, None, "no hall reports a heat pump");
        // A heat pump reported: it is its own part, not in the losses.
        m.facilities[0].heat_pump_power_kw = Reading::good(12.0, 99.0);
        let s = Snapshot::from_image("s", &topo, &m, 100.0, 30.0, "Auto", 87.0, 0);
        assert_eq!((s.site.heat_pump_kw, s.halls[0].heat_pump_kw), (Some(12.0), Some(12.0)));
        assert_eq!((s.site.cooling_kw, s.site.loss_kw), (Some(25.0), Some(63.0)));
        // Its meter gone stale: unknown, and the losses with it (not 12 kW more of them).
        m.facilities[0].heat_pump_power_kw = Reading::good(12.0, -400.0);
        let s = Snapshot::from_image("s", &topo, &m, 100.0, 30.0, "Auto", 87.0, 0);
        assert_eq!((s.site.heat_pump_kw, s.site.loss_kw), (None, None));
        m.facilities[0].heat_pump_power_kw = unmapped;
        let s = Snapshot::from_image("s", &topo, &m, 100.0, 30.0, "Auto", 87.0, 0);
        assert_eq!(
            s.site.hottest_gpu_c,
            Some(80.0),
            "the stale 95 °C rack is not the hottest"
        );
        assert_eq!(s.site.hottest_margin_k, Some(7.0));
        assert_eq!(s.site.racks_fresh, 1);
        assert!(s.cdus[0].pump_kw.is_some() && s.cdus[1].pump_kw.is_none());
    }
}
