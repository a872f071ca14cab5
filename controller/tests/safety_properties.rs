//! Property tests of the controller's safety envelope: for any sequence of process images (NaN,
//! infinite, out-of-range and stale readings, readings from the future, missing GPU values) and
//! any proposals of a policy (NaN, infinite, out of range, wrong racks, wrong lengths), every
//! action the controller emits is within the equipment limits and the rate limits, Safe mode
//! follows stale GPU telemetry, and no power limit is raised while telemetry is stale.

use coolplane_controller::{Controller, ControllerConfig, Mode};
use coolplane_core::signals::{
    CduMeasurement, FacilityMeasurement, GpuTelemetry, Measurements, Quality, RackMeasurement, RackPowerLimits,
    Reading, RejectionMode,
};
use coolplane_core::site::builtin_site;
use coolplane_core::topology::Topology;
use coolplane_policies::{CduSetpoint, Decision, PlantLimits, Policy, PolicyInput, Setpoints};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// A policy that proposes whatever the test hands it.
struct Scripted(Arc<Mutex<VecDeque<Decision>>>);

impl Policy for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn decide(&mut self, input: &PolicyInput<'_>) -> Decision {
        self.0.lock().unwrap().pop_front().unwrap_or_else(|| Decision {
            setpoints: input.current.clone(),
            power_limits: Vec::new(),
            placement: None,
            reasons: Vec::new(),
            plan: None,
        })
    }
}

fn any_value(lo: f64, hi: f64) -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => lo..hi,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(1e300),
        1 => Just(-1e300),
        1 => Just(0.0),
    ]
}

/// Age of a reading relative to the tick: fresh, stale, from the future, or not a time.
fn any_age() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => 0.0..120.0,
        2 => 181.0..10_000.0,
        1 => -600.0..0.0,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
    ]
}

#[derive(Debug, Clone)]
struct RSpec {
    value: f64,
    age: f64,
    quality: Quality,
}

fn any_reading(lo: f64, hi: f64) -> impl Strategy<Value = RSpec> {
    (
        any_value(lo, hi),
        any_age(),
        prop_oneof![6 => Just(Quality::Good), 1 => Just(Quality::Uncertain), 1 => Just(Quality::Bad)],
    )
        .prop_map(|(value, age, quality)| RSpec { value, age, quality })
}

impl RSpec {
    fn at(&self, now: f64) -> Reading {
        Reading {
            value: self.value,
            t_s: now - self.age,
            quality: self.quality,
        }
    }
}

/// Current power limits in telemetry: a base value for every GPU, a few exceptions, and a length
/// that may be short (missing values) or zero.
#[derive(Debug, Clone)]
struct LimitsSpec {
    base: f32,
    overrides: Vec<(usize, f32)>,
    len_frac: f64,
}

fn any_f32_limit() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => 0.0f32..1500.0,
        1 => Just(f32::NAN),
        1 => Just(f32::INFINITY),
        1 => Just(-5.0f32),
    ]
}

#[derive(Debug, Clone)]
struct Tick {
    dt: f64,
    gpu_age: f64,
    gpu_temps_present: bool,
    cdus: Vec<[RSpec; 4]>,
    facilities: Vec<[RSpec; 2]>,
    racks: Vec<RSpec>,
    limits: LimitsSpec,
    proposal_cdus: Vec<(f64, f64)>,
    proposal_fac: Vec<f64>,
    /// Per hall: proposed heat-rejection mode and the mode the device reads back (codes; a code
    /// no mode has: none proposed / not reported).
    proposal_modes: Vec<(u16, u16)>,
    proposal_limits: Vec<(u32, f32, usize)>,
}

fn any_tick(n_cdu: usize, n_hall: usize, n_rack: usize) -> impl Strategy<Value = Tick> {
    let cdu = (
        any_reading(20.0, 60.0),
        any_reading(0.0, 4000.0),
        any_reading(20.0, 60.0),
        any_reading(0.0, 4000.0),
    )
        .prop_map(|(a, b, c, d)| [a, b, c, d]);
    let fac = (any_reading(10.0, 50.0), any_reading(10.0, 50.0)).prop_map(|(a, b)| [a, b]);
    let limits = (
        any_f32_limit(),
        proptest::collection::vec((0usize..5000, any_f32_limit()), 0..6),
        prop_oneof![4 => Just(1.0), 1 => Just(0.0), 1 => 0.0..1.0],
    )
        .prop_map(|(base, overrides, len_frac)| LimitsSpec {
            base,
            overrides,
            len_frac,
        });
    (
        (
            prop_oneof![6 => 1.0..120.0, 1 => Just(0.0), 1 => 120.0..3600.0],
            any_age(),
            prop_oneof![9 => Just(true), 1 => Just(false)],
        ),
        proptest::collection::vec(cdu, n_cdu),
        proptest::collection::vec(fac, n_hall),
        proptest::collection::vec(any_reading(20.0, 110.0), n_rack),
        limits,
        proptest::collection::vec((any_value(0.0, 80.0), any_value(-500.0, 5000.0)), n_cdu),
        (
            proptest::collection::vec(any_value(0.0, 60.0), n_hall),
            proptest::collection::vec((0u16..4, 0u16..4), n_hall),
        ),
        proptest::collection::vec((0u32..(n_rack as u32 + 2), any_f32_limit(), 0usize..200), 0..4),
    )
        .prop_map(
            |((dt, gpu_age, gpu_temps_present), cdus, facilities, racks, limits, pc, (pf, pm), pl)| Tick {
                dt,
                gpu_age,
                gpu_temps_present,
                cdus,
                facilities,
                racks,
                limits,
                proposal_cdus: pc,
                proposal_fac: pf,
                proposal_modes: pm,
                proposal_limits: pl,
            },
        )
}

fn image(now: f64, t: &Tick, n_gpu: usize) -> Measurements {
    let n = (n_gpu as f64 * t.limits.len_frac) as usize;
    let mut power_limit_w = vec![t.limits.base; n];
    for &(i, w) in &t.limits.overrides {
        if let Some(x) = power_limit_w.get_mut(i % n_gpu.max(1)) {
            *x = w;
        }
    }
    Measurements {
        t_s: now,
        cdus: t
            .cdus
            .iter()
            .map(|[s, f, ss, fs]| CduMeasurement {
                supply_temp_c: s.at(now),
                flow_lpm: f.at(now),
                supply_setpoint_c: ss.at(now),
                flow_setpoint_lpm: fs.at(now),
                ..Default::default()
            })
            .collect(),
        facilities: t
            .facilities
            .iter()
            .zip(&t.proposal_modes)
            .map(|([s, ss], &(_, rb))| FacilityMeasurement {
                supply_temp_c: s.at(now),
                supply_setpoint_c: ss.at(now),
                rejection_mode: RejectionMode::from_code(rb),
                ..Default::default()
            })
            .collect(),
        racks: t
            .racks
            .iter()
            .map(|r| RackMeasurement {
                gpu_temp_max_c: r.at(now),
                ..Default::default()
            })
            .collect(),
        gpus: GpuTelemetry {
            t_s: now - t.gpu_age,
            temp_c: if t.gpu_temps_present {
                vec![60.0; n_gpu]
            } else {
                Vec::new()
            },
            power_limit_w,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn decision(t: &Tick) -> Decision {
    Decision {
        setpoints: Setpoints {
            cdus: t
                .proposal_cdus
                .iter()
                .map(|&(supply_c, flow_lpm)| CduSetpoint { supply_c, flow_lpm })
                .collect(),
            facilities: t.proposal_fac.clone(),
            rejection: t
                .proposal_modes
                .iter()
                .map(|&(m, _)| RejectionMode::from_code(m).unwrap_or_default())
                .collect(),
        },
        power_limits: t
            .proposal_limits
            .iter()
            .map(|&(rack, w, n)| RackPowerLimits {
                rack,
                limits_w: vec![w; n],
            })
            .collect(),
        placement: None,
        reasons: Vec::new(),
        plan: None,
    }
}

fn check_sequence(site_name: &str, ticks: &[Tick]) -> Result<(), TestCaseError> {
    let site = builtin_site(site_name).unwrap();
    let topo = Topology::new(&site);
    let limits = PlantLimits::from_site(&site, &topo);
    let cfg = ControllerConfig::default();
    let queue = Arc::new(Mutex::new(VecDeque::new()));
    let mut c = Controller::new(&site, Box::new(Scripted(queue.clone())), cfg);
    let mut now = 1000.0;
    // When each ramp last moved (the controller holds a ramp for `ramp_hold_s` after a move,
    // then moves it by at most its rate times the time since, which counts at most the hold
    // rounded up to whole ticks, so less than hold + tick).
    let (n_cdu, n_hall) = (topo.cdus.len(), topo.halls.len());
    let (mut supply_moved, mut flow_moved, mut fac_moved) = (vec![0.0; n_cdu], vec![0.0; n_cdu], vec![0.0; n_hall]);
    // Per hall: when the commanded heat-rejection mode last changed.
    let mut mode_moved = vec![f64::NEG_INFINITY; n_hall];
    let span_min = |moved: f64, now: f64, dt: f64| (now - moved).min(cfg.ramp_hold_s + dt) / 60.0;
    for (k, t) in ticks.iter().enumerate() {
        now += t.dt;
        if k == 0 {
            supply_moved.fill(now);
            flow_moved.fill(now);
            fac_moved.fill(now);
        }
        let img = image(now, t, topo.gpu_count);
        queue.lock().unwrap().push_back(decision(t));
        let before = c.setpoints().clone();
        let dt = if k == 0 { cfg.slow_period_s } else { t.dt };
        let a = c.tick(now, &img);
        let after = c.setpoints().clone();
        prop_assert_eq!(a.cdus.len(), topo.cdus.len());
        prop_assert_eq!(a.facilities.len(), topo.halls.len());
        for (i, cmd) in a.cdus.iter().enumerate() {
            let l = limits.cdus[i];
            let sp = after.cdus[i];
            prop_assert!(cmd.heartbeat, "CDU {} without heartbeat", i);
            prop_assert!(
                sp.supply_c >= l.supply_min_c && sp.supply_c <= l.supply_max_c,
                "tick {}: CDU {} supply {} outside [{}, {}]",
                k,
                i,
                sp.supply_c,
                l.supply_min_c,
                l.supply_max_c
            );
            prop_assert!(
                sp.flow_lpm >= l.flow_min_lpm - 0.5 && sp.flow_lpm <= l.flow_max_lpm + 0.5,
                "tick {}: CDU {} flow {} outside [{}, {}]",
                k,
                i,
                sp.flow_lpm,
                l.flow_min_lpm,
                l.flow_max_lpm
            );
            if let Some(s) = cmd.supply_temp_setpoint_c {
                prop_assert_eq!(s, sp.supply_c, "written supply differs from the commanded one");
            }
            if let Some(f) = cmd.flow_setpoint_lpm {
                prop_assert_eq!(f, sp.flow_lpm, "written flow differs from the commanded one");
            }
            if k > 0 {
                // The first tick may move from design values without a previous commanded value.
                // A move starts from what was commanded, or from the setpoint the device reads
                // back as in force (adopted at start and after the CDU was stale).
                let allowed = cfg.supply_rate_k_per_min * span_min(supply_moved[i], now, dt) + 0.05 + 1e-9;
                let ds = (sp.supply_c - before.cdus[i].supply_c).abs();
                let rb = img.cdus[i].supply_setpoint_c;
                let from_rb = rb
                    .usable(now, cfg.stale_after_s)
                    .then(|| (sp.supply_c - rb.value.clamp(l.supply_min_c, l.supply_max_c)).abs());
                prop_assert!(
                    ds <= allowed || from_rb.is_some_and(|d| d <= allowed),
                    "tick {}: CDU {} supply moved {} K in {} s (from the read-back: {:?})",
                    k,
                    i,
                    ds,
                    dt,
                    from_rb
                );
                let allowed_down =
                    cfg.flow_down_rate_frac_per_min * l.flow_design_lpm * span_min(flow_moved[i], now, dt) + 0.5 + 1e-9;
                let down = before.cdus[i].flow_lpm - sp.flow_lpm;
                let rbf = img.cdus[i].flow_setpoint_lpm;
                let down_rb = rbf
                    .usable(now, cfg.stale_after_s)
                    .then(|| rbf.value.clamp(l.flow_min_lpm, l.flow_max_lpm) - sp.flow_lpm);
                prop_assert!(
                    down <= allowed_down || down_rb.is_some_and(|d| d <= allowed_down),
                    "tick {}: CDU {} flow fell {} L/min in {} s",
                    k,
                    i,
                    down,
                    dt
                );
            }
            if sp.supply_c != before.cdus[i].supply_c {
                supply_moved[i] = now;
            }
            if sp.flow_lpm != before.cdus[i].flow_lpm {
                flow_moved[i] = now;
            }
        }
        for (h, cmd) in a.facilities.iter().enumerate() {
            let l = limits.facilities[h];
            let s = after.facilities[h];
            prop_assert!(cmd.heartbeat);
            prop_assert!(
                s >= l.supply_min_c && s <= l.supply_max_c,
                "hall {} facility {} outside limits",
                h,
                s
            );
            if let Some(w) = cmd.supply_temp_setpoint_c {
                prop_assert_eq!(w, s);
            }
            // Dry or adiabatic only where the equipment has the assist and the hall's data is
            // fresh; a change to either only after the hold time since the last change; what is
            // written is what is commanded.
            let mode = after.rejection[h];
            if mode != RejectionMode::Auto {
                prop_assert!(l.adiabatic_assist, "hall {} in {:?} without adiabatic assist", h, mode);
                prop_assert!(
                    img.facilities[h].supply_temp_c.usable(now, cfg.stale_after_s),
                    "hall {} in {:?} on stale data",
                    h,
                    mode
                );
            }
            if mode != before.rejection[h] {
                // (Taking over the mode the device reads back in force is not a command.)
                if mode != RejectionMode::Auto && Some(mode) != img.facilities[h].rejection_mode {
                    prop_assert!(
                        now - mode_moved[h] >= cfg.rejection_mode_hold_s,
                        "hall {} mode changed to {:?} {} s after the last change",
                        h,
                        mode,
                        now - mode_moved[h]
                    );
                }
                mode_moved[h] = now;
            }
            if let Some(m) = cmd.rejection_mode {
                prop_assert_eq!(m, mode, "hall {} written mode differs from the commanded one", h);
            }
            if k > 0 {
                let allowed = cfg.facility_rate_k_per_min * span_min(fac_moved[h], now, dt) + 0.05 + 1e-9;
                let ds = (s - before.facilities[h]).abs();
                let rb = img.facilities[h].supply_setpoint_c;
                let from_rb = rb
                    .usable(now, cfg.stale_after_s)
                    .then(|| (s - rb.value.clamp(l.supply_min_c, l.supply_max_c)).abs());
                prop_assert!(
                    ds <= allowed || from_rb.is_some_and(|d| d <= allowed),
                    "hall {} moved {} K",
                    h,
                    ds
                );
            }
            if s != before.facilities[h] {
                fac_moved[h] = now;
            }
        }
        let age = now - img.gpus.t_s;
        let gpu_stale = age.is_nan() || age > cfg.stale_after_s || img.gpus.temp_c.is_empty();
        if gpu_stale {
            prop_assert_eq!(
                c.mode(),
                Mode::Safe,
                "tick {}: stale GPU telemetry and not in Safe mode",
                k
            );
        }
        let (lo, hi) = (limits.gpu_min_cap_w as f32, limits.gpu_tdp_w as f32);
        for pl in &a.power_limits {
            let rack = topo.racks.get(pl.rack as usize);
            prop_assert!(
                rack.is_some(),
                "power limits for rack {}, which does not exist",
                pl.rack
            );
            let rack = rack.unwrap();
            prop_assert!(pl.limits_w.len() <= rack.gpus.len());
            for (i, &w) in pl.limits_w.iter().enumerate() {
                prop_assert!(
                    w.is_finite() && w >= lo && w <= hi,
                    "limit {} outside [{}, {}]",
                    w,
                    lo,
                    hi
                );
                if gpu_stale {
                    let now_limit = img
                        .gpus
                        .power_limit_w
                        .get(rack.gpus.start + i)
                        .copied()
                        .filter(|x| x.is_finite())
                        .unwrap_or(lo);
                    prop_assert!(
                        w <= now_limit.max(lo),
                        "tick {}: limit raised {} → {} W on stale telemetry",
                        k,
                        now_limit,
                        w
                    );
                }
            }
        }
    }
    Ok(())
}

const SITE: &str = "supernode-640";
/// A site whose dry coolers have adiabatic assist (the heat-rejection modes exist there).
const SITE_ASSIST: &str = "hall-10k";

fn sizes_of(site: &str) -> (usize, usize, usize) {
    let topo = Topology::new(&builtin_site(site).unwrap());
    (topo.cdus.len(), topo.halls.len(), topo.racks.len())
}

fn sizes() -> (usize, usize, usize) {
    sizes_of(SITE)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_action_is_within_limits_and_rates_for_any_images_and_proposals(
        ticks in {
            let (c, h, r) = sizes();
            proptest::collection::vec(any_tick(c, h, r), 1..40)
        }
    ) {
        check_sequence(SITE, &ticks)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The same on a hall with adiabatic assist, where the policy's heat-rejection modes reach
    /// the equipment (hold time, stale data, safe mode).
    #[test]
    fn heat_rejection_modes_are_held_and_fall_back_to_auto(
        ticks in {
            let (c, h, r) = sizes_of(SITE_ASSIST);
            // Mostly fresh cooling data (with a dozen CDUs, arbitrary readings are almost never
            // all fresh at once, and the modes would never leave auto).
            let tick = (any_tick(c, h, r), proptest::bool::weighted(0.8)).prop_map(|(mut t, fresh)| {
                if fresh {
                    let freshen = |x: &mut RSpec, v: f64| {
                        *x = RSpec { value: if x.value.is_finite() { x.value.clamp(v - 10.0, v + 10.0) } else { v }, age: 1.0, quality: Quality::Good };
                    };
                    for cdu in &mut t.cdus {
                        let [s, f, ss, fs] = cdu;
                        freshen(s, 40.0);
                        freshen(f, 2000.0);
                        freshen(ss, 40.0);
                        freshen(fs, 2000.0);
                    }
                    for [s, ss] in &mut t.facilities {
                        freshen(s, 30.0);
                        freshen(ss, 30.0);
                    }
                    for r in &mut t.racks {
                        freshen(r, 70.0);
                    }
                    t.gpu_age = 1.0;
                    t.gpu_temps_present = true;
                }
                t
            });
            proptest::collection::vec(tick, 1..40)
        }
    ) {
        check_sequence(SITE_ASSIST, &ticks)?;
    }
}

/// Regressions the property found, kept as plain tests.
mod regressions {
    use super::*;

    fn fresh_tick(n_cdu: usize, n_hall: usize, n_rack: usize) -> Tick {
        let r = |v: f64| RSpec {
            value: v,
            age: 0.0,
            quality: Quality::Good,
        };
        Tick {
            dt: 60.0,
            gpu_age: 0.0,
            gpu_temps_present: true,
            cdus: vec![[r(40.0), r(2000.0), r(40.0), r(2000.0)]; n_cdu],
            facilities: vec![[r(32.0), r(32.0)]; n_hall],
            racks: vec![r(70.0); n_rack],
            limits: LimitsSpec {
                base: 700.0,
                overrides: Vec::new(),
                len_frac: 1.0,
            },
            proposal_cdus: vec![(40.0, 2000.0); n_cdu],
            proposal_fac: vec![32.0; n_hall],
            proposal_modes: vec![(0, 0); n_hall],
            proposal_limits: Vec::new(),
        }
    }

    #[test]
    fn nan_proposals_do_not_reach_the_setpoints() {
        let (c, h, r) = sizes();
        let mut t = fresh_tick(c, h, r);
        t.proposal_cdus[0] = (f64::NAN, f64::NAN);
        t.proposal_fac[0] = f64::NAN;
        t.proposal_limits = vec![(0, f32::NAN, 4)];
        check_sequence(SITE, &[fresh_tick(c, h, r), t.clone(), t]).unwrap();
    }

    #[test]
    fn an_unknown_current_limit_is_not_raised_on_stale_telemetry() {
        let (c, h, r) = sizes();
        let mut t = fresh_tick(c, h, r);
        t.gpu_age = 1000.0;
        t.limits.base = f32::NAN;
        t.proposal_limits = vec![(0, 1e9, 8)];
        check_sequence(SITE, &[fresh_tick(c, h, r), t]).unwrap();
    }

    #[test]
    fn a_reading_with_a_nan_time_stamp_is_stale() {
        let (c, h, r) = sizes();
        let mut t = fresh_tick(c, h, r);
        t.gpu_age = f64::NAN;
        check_sequence(SITE, &[t]).unwrap();
    }
}
