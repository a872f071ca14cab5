//! Scenario harness: KPIs of short scenarios checked against physics and bookkeeping identities,
//! determinism, the baselines' claims, and scenario-file errors.
//!
//! Tests that read the real data in `../shared/data` skip with a note when it is absent, unless
//! `COOLPLANE_REQUIRE_DATA` is set (CI sets it), in which case they fail.

use coolplane_core::signals::RejectionMode;
use coolplane_policies::{by_name, EnergyPlan};
use coolplane_scenario::run::plan_accuracy;
use coolplane_scenario::spec::{EventSpec, ScenarioSpec};
use coolplane_scenario::{run, RunOptions, RunReport};
use coolplane_sim_plant::faults::{FaultKind, SensorFailure, SensorPoint};
use std::path::{Path, PathBuf};

fn spec(days: f64, warmup_h: f64) -> ScenarioSpec {
    let mut s = ScenarioSpec::default_for_site("hall-10k");
    s.weather.start_day = Some(180.0);
    s.weather.days = Some(days);
    s.scenario.warmup_h = warmup_h;
    s
}

fn run_spec(s: &ScenarioSpec, policy: &str) -> coolplane_scenario::RunResult {
    let sc = s.resolve(Path::new(".")).expect("scenario resolves");
    run(
        &sc,
        by_name(policy).expect("policy"),
        &RunOptions {
            record: true,
            ..Default::default()
        },
        &mut |_| {},
    )
    .expect("run")
}

fn data_dir() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data");
    if d.join("CHN_Beijing.Beijing.545110_IWEC.epw").exists() {
        Some(d)
    } else if std::env::var_os("COOLPLANE_REQUIRE_DATA").is_some() {
        panic!("COOLPLANE_REQUIRE_DATA is set but {} holds no data", d.display());
    } else {
        eprintln!("note: {} not found; skipping the real-data test", d.display());
        None
    }
}

#[test]
fn one_day_kpis_obey_the_bookkeeping_identities_and_bounds() {
    let s = spec(1.0, 3.0);
    let r = run_spec(&s, "vendor-default");
    let k = &r.report.kpis;
    let site = coolplane_core::site::builtin_site("hall-10k").unwrap();
    assert!(r.report.checks.all_ok(), "{:?}", r.report.checks);
    assert!((k.scored_s - 86_400.0).abs() < 1e-6);
    // Facility energy is exactly IT + electrical losses + cooling + heat pump + misc.
    let sum = k.it_energy_kwh
        + k.electrical_loss_energy_kwh
        + k.cooling_energy_kwh
        + k.heat_pump_energy_kwh
        + k.misc_energy_kwh;
    assert!(
        (k.facility_energy_kwh - sum).abs() <= 1e-6 * sum,
        "{} vs {sum}",
        k.facility_energy_kwh
    );
    // Cooling is the sum of its parts.
    let parts = k.cdu_pump_energy_kwh
        + k.facility_pump_energy_kwh
        + k.rejection_fan_energy_kwh
        + k.chiller_energy_kwh
        + k.air_handler_energy_kwh
        + k.electrical_room_cooling_energy_kwh;
    assert!((k.cooling_energy_kwh - parts).abs() <= 1e-9 * parts.max(1.0));
    // The PUE cannot be below the electrical chain's own losses: 1 / (η_PDU · η_UPS,max).
    let eta_ups_max = site
        .electrical
        .ups_efficiency_curve
        .iter()
        .map(|p| p[1])
        .fold(0.0, f64::max);
    let floor = 1.0 / (site.electrical.pdu_efficiency * eta_ups_max);
    assert!(k.pue > floor, "PUE {} below the electrical floor {floor}", k.pue);
    // IT energy lies between every GPU idle (static power only, nodes' base and switches) and
    // every GPU at TDP with node overhead, over 24 h.
    let racks = site.rack_count() as f64;
    let rk = &site.halls[0].rack;
    let gpus_per_rack = (rk.nodes_per_rack * rk.gpus_per_node) as f64;
    let fixed_kw = racks * (rk.nodes_per_rack as f64 * rk.node_base_w + rk.switch_w) / 1e3;
    let lo = (fixed_kw + racks * gpus_per_rack * site.gpu.idle_w * 0.8 / 1e3) * 24.0;
    let hi = site.design_it_kw() * 1.05 * 24.0;
    assert!(
        k.it_energy_kwh > lo && k.it_energy_kwh < hi,
        "{lo} < {} < {hi}",
        k.it_energy_kwh
    );
    // Peak 15-minute demand is at least the mean facility power.
    assert!(k.peak_15min_kw >= k.facility_energy_kwh / 24.0 - 1e-6);
    // Design setpoints on a mild summer day: no throttling, no shutdowns, no writes.
    assert_eq!(k.throttle_gpu_s, 0.0);
    assert_eq!(k.gpu_shutdowns, 0);
    assert_eq!(
        k.setpoint_writes, 0,
        "vendor-default writes nothing: the design setpoints are the local defaults"
    );
    // The series covers warm-up and scoring.
    assert!(r.series.rows.first().unwrap().t_h < 0.0 && r.series.rows.last().unwrap().t_h > 23.9);
}

#[test]
fn the_same_scenario_and_seed_give_identical_kpis() {
    let s = spec(0.5, 1.0);
    let strip = |r: &RunReport| {
        let mut v = serde_json::to_value(r).unwrap();
        let m = v.as_object_mut().unwrap();
        m.remove("wall_time_s");
        m.remove("compute_time_ratio");
        v
    };
    let a = run_spec(&s, "trim-respond");
    let b = run_spec(&s, "trim-respond");
    assert_eq!(strip(&a.report), strip(&b.report));
    assert_eq!(a.series, b.series);
    let mut s2 = s.clone();
    s2.scenario.seed = 2;
    let c = run_spec(&s2, "trim-respond");
    assert_ne!(
        strip(&a.report),
        strip(&c.report),
        "another seed is another plant and workload"
    );
}

#[test]
fn trim_respond_saves_cooling_energy_without_throttling() {
    let s = spec(2.0, 6.0);
    let vd = run_spec(&s, "vendor-default").report;
    let tr = run_spec(&s, "trim-respond").report;
    assert!(
        tr.kpis.cooling_energy_kwh < vd.kpis.cooling_energy_kwh,
        "{} vs {}",
        tr.kpis.cooling_energy_kwh,
        vd.kpis.cooling_energy_kwh
    );
    assert_eq!(tr.kpis.throttle_gpu_s, 0.0);
    assert_eq!(tr.kpis.gpu_shutdowns, 0);
    assert!(tr.kpis.setpoint_writes > 0);
    // Writes per device, counted beside the total: the devices' counts add up to it, and the
    // CDUs' lie between the most-written CDU's and 12 times it (hall-10k's 12 CDUs);
    // trim-respond resets the facility water too.
    let k = &tr.kpis;
    assert_eq!(k.cdu_setpoint_writes + k.facility_setpoint_writes, k.setpoint_writes);
    assert!(
        k.setpoint_writes_max_cdu > 0
            && k.setpoint_writes_max_cdu <= k.cdu_setpoint_writes
            && 12 * k.setpoint_writes_max_cdu >= k.cdu_setpoint_writes,
        "{} writes, {} to the CDUs, the most to one CDU {}",
        k.setpoint_writes,
        k.cdu_setpoint_writes,
        k.setpoint_writes_max_cdu
    );
    assert!(k.facility_setpoint_writes > 0 && k.setpoint_writes_max_facility == k.facility_setpoint_writes);
    // Warmer coolant raises leakage: the same work costs a little more IT energy.
    assert!(tr.kpis.it_energy_kwh >= vd.kpis.it_energy_kwh * 0.999);
}

#[test]
fn a_budget_cut_below_the_load_is_measured_as_exceedance() {
    let mut s = spec(0.5, 1.0);
    s.events.push(EventSpec {
        start_h: 2.0,
        end_h: Some(4.0),
        fault: FaultKind::BudgetCut { budget_kw: 8_000.0 },
    });
    let r = run_spec(&s, "vendor-default");
    let k = &r.report.kpis;
    // No policy caps power yet: the whole cut window is exceeded. Bound the exceedance by the
    // lowest and highest facility power recorded in the window, times its two hours.
    let window: Vec<_> = r
        .series
        .rows
        .iter()
        .filter(|x| x.t_h > 2.0 + 1e-9 && x.t_h <= 4.0 + 1e-9)
        .collect();
    let pmin = window.iter().map(|x| x.facility_kw).fold(f64::INFINITY, f64::min);
    let pmax = window.iter().map(|x| x.facility_kw).fold(0.0, f64::max);
    assert!(pmin > 8_000.0, "the synthetic load stays above the cut");
    assert!(
        k.budget_exceed_kwh >= (pmin - 8_000.0) * 2.0 * 0.99 && k.budget_exceed_kwh <= (pmax - 8_000.0) * 2.0 * 1.01,
        "{}",
        k.budget_exceed_kwh
    );
    assert!((k.budget_exceed_longest_s - 7_200.0).abs() <= 60.0 + 1e-6);
    assert!(window.iter().all(|x| (x.budget_kw - 8_000.0).abs() < 1e-9));
}

#[test]
fn coordinated_holds_an_unannounced_10pct_cut_within_a_tick_near_the_least_work_lost() {
    // The hall's draw under vendor-default over the window sets the cut: 90 % of its mean.
    let mut s = spec(0.25, 1.0);
    s.scenario.step_s = 5.0;
    let base = run_spec(&s, "vendor-default");
    let window: Vec<_> = base
        .series
        .rows
        .iter()
        .filter(|x| x.t_h > 1.0 && x.t_h <= 3.0)
        .collect();
    let mean = window.iter().map(|x| x.facility_kw).sum::<f64>() / window.len() as f64;
    let budget_kw = (0.9 * mean).round();
    s.events.push(EventSpec {
        start_h: 1.0,
        end_h: Some(3.0),
        fault: FaultKind::BudgetCut { budget_kw },
    });
    let vd = run_spec(&s, "vendor-default").report;
    let co = run_spec(&s, "coordinated");
    let (vc, cc) = (
        vd.budget_cut.expect("cut report"),
        co.report.budget_cut.expect("cut report"),
    );
    assert!((cc.cut_h - 2.0).abs() < 1e-6, "{cc:?}");
    // vendor-default caps nothing and stays over; coordinated is over only in the ticks in
    // which the cut or a job start arrives unannounced (two starts on consecutive ticks make a
    // 10 s spell); in ticks it had to answer, over at most a few times (the overhead it
    // smooths lags the cooling by a minute: measured 2 ticks, 6-15 kW over, in these 2 h).
    assert!(
        vc.exceed_kwh > 100.0 && vc.work_lost_gpu_h == 0.0 && vc.exceed_uncorrected_s > 3_000.0,
        "{vc:?}"
    );
    assert!(cc.exceed_uncorrected_s <= 15.0, "{cc:?}");
    assert!(cc.exceed_longest_s <= 10.0 + 1e-9, "{cc:?}");
    assert!(cc.exceed_kwh < 0.05 * vc.exceed_kwh, "{cc:?} vs {vc:?}");
    // Work: at least the bound (a bound below it would be wrong), and within 1 % of the work
    // demanded of it.
    assert!(
        cc.least_lost_gpu_h > 0.0 && cc.work_lost_gpu_h >= cc.least_lost_gpu_h,
        "{cc:?}"
    );
    assert!(cc.excess_lost_pct <= 1.0, "{cc:?}");
    assert_eq!(co.report.kpis.throttle_gpu_s, 0.0);
    // Operators hear of it: the shedding and its lifting are events.
    assert!(
        co.events.iter().any(|e| e.message.contains("GPU power shed")),
        "no shedding event"
    );
    assert!(
        co.events.iter().any(|e| e.message.contains("budget caps lifted")),
        "no lifting event"
    );
}

#[test]
fn json_report_has_the_documented_keys() {
    let r = run_spec(&spec(0.1, 0.5), "vendor-default");
    let v = serde_json::to_value(&r.report).unwrap();
    for key in [
        "site",
        "policy",
        "seed",
        "pue",
        "pue_boundary",
        "it_energy_kwh",
        "facility_energy_kwh",
        "cooling_energy_kwh",
        "throttle_gpu_s",
        "near_throttle_gpu_s",
        "gpu_shutdowns",
        "work_lost_pct",
        "budget_exceed_kwh",
        "peak_15min_kw",
        "water_l",
        "energy_balance_error_pct",
        "supply_temp_max_dev_k",
        "setpoint_writes",
        "cdu_setpoint_writes",
        "facility_setpoint_writes",
        "setpoint_writes_max_cdu",
        "setpoint_writes_max_facility",
        "compute_time_ratio",
    ] {
        assert!(v.get(key).is_some(), "missing key {key}");
    }
    assert_eq!(v["policy"], "vendor-default");
    assert_eq!(v["site"], "hall-10k");
}

fn parse_err(text: &str) -> String {
    match ScenarioSpec::from_toml_str("bad.toml", text) {
        Ok(s) => match s.resolve(Path::new(".")) {
            Ok(_) => panic!("accepted a bad scenario:\n{text}"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_scenario_files_are_rejected_with_the_field_named() {
    let head = "[scenario]\nname = \"x\"\nsite = \"hall-10k\"\n";
    let e = parse_err(&format!("{head}stepp_s = 60\n"));
    assert!(e.contains("stepp_s") && e.contains("bad.toml"), "{e}");
    let e = parse_err(&format!("{head}step_s = 0\n"));
    assert!(e.contains("scenario.step_s") && e.contains('0'), "{e}");
    let e = parse_err(&format!("{head}[weather]\nperiod = \"hot-week\"\n"));
    assert!(
        e.contains("weather.period") && e.contains("hot-week") && e.contains("peak-heat-week"),
        "{e}"
    );
    let e = parse_err(&format!("{head}[workload]\nkind = \"helios\"\n"));
    assert!(e.contains("workload.path"), "{e}");
    let e = parse_err(&format!("{head}[workload]\nkind = \"borg\"\n"));
    assert!(e.contains("workload.kind") && e.contains("borg"), "{e}");
    let e = parse_err(&format!(
        "{head}[[events]]\nstart_h = 1.0\nfault = {{ kind = \"pump-trip\", cdu = 12 }}\n"
    ));
    assert!(
        e.contains("events[0]") && e.contains("cdu 12") && e.contains("12"),
        "{e}"
    );
    let e = parse_err(&format!(
        "{head}[[events]]\nstart_h = 1.0\nfault = {{ kind = \"meteor\" }}\n"
    ));
    assert!(e.contains("meteor"), "{e}");
    let e = parse_err(&format!(
        "{head}[[events]]\nstart_h = 3.0\nend_h = 2.0\nfault = {{ kind = \"comms-loss\" }}\n"
    ));
    assert!(e.contains("events[0].end_h"), "{e}");
    let e = parse_err("[scenario]\nname = \"x\"\nsite = \"hall-1\"\n");
    assert!(e.contains("scenario.site") && e.contains("hall-1"), "{e}");
    let e = parse_err(&format!("{head}[weather]\nsource = \"/nonexistent/x.epw\"\n"));
    assert!(e.contains("/nonexistent/x.epw"), "{e}");
    // A broken weather file: the error names the file and the line.
    let dir = std::env::temp_dir().join(format!("coolplane-bad-epw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let epw = dir.join("broken.epw");
    std::fs::write(&epw, "LOCATION,X\n").unwrap();
    let e = parse_err(&format!("{head}[weather]\nsource = \"{}\"\n", epw.display()));
    assert!(e.contains("broken.epw"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_fault_parameters_are_rejected_with_the_field_named() {
    let head = "[scenario]\nname = \"x\"\nsite = \"hall-10k\"\n";
    for (fault, field, value) in [
        ("{ kind = \"valve-stuck\", cdu = 0, position = nan }", "events[0].fault.position", "NaN"),
        ("{ kind = \"valve-stuck\", cdu = 0, position = 1.5 }", "events[0].fault.position", "1.5"),
        ("{ kind = \"hx-fouling\", cdu = 0, ua_loss_pct = -10.0 }", "events[0].fault.ua_loss_pct", "-10"),
        ("{ kind = \"hx-fouling\", cdu = 0, ua_loss_pct = nan }", "events[0].fault.ua_loss_pct", "NaN"),
        ("{ kind = \"fan-failure\", hall = 0, fraction = -0.5 }", "events[0].fault.fraction", "-0.5"),
        ("{ kind = \"fan-failure\", hall = 0, fraction = inf }", "events[0].fault.fraction", "inf"),
        ("{ kind = \"heat-wave\", offset_k = nan }", "events[0].fault.offset_k", "NaN"),
        ("{ kind = \"heat-wave\", offset_k = 80.0 }", "events[0].fault.offset_k", "80"),
        ("{ kind = \"budget-cut\", budget_kw = nan }", "events[0].fault.budget_kw", "NaN"),
        ("{ kind = \"budget-cut\", budget_kw = -100.0 }", "events[0].fault.budget_kw", "-100"),
        ("{ kind = \"budget-cut\", budget_kw = 0.0 }", "events[0].fault.budget_kw", "0"),
        ("{ kind = \"load-storm\", util = 5.0 }", "events[0].fault.util", "5"),
        ("{ kind = \"load-storm\", util = nan }", "events[0].fault.util", "NaN"),
        (
            "{ kind = \"sensor\", point = { point = \"cdu-supply-temp\", index = 0 }, failure = { mode = \"drift\", rate_per_h = nan } }",
            "events[0].fault.failure.rate_per_h",
            "NaN",
        ),
    ] {
        let e = parse_err(&format!("{head}[[events]]\nstart_h = 1.0\nfault = {fault}\n"));
        assert!(e.contains(field) && e.contains(value), "{fault}: {e}");
    }
    // Times: NaN start, an end before the start, a start before the warm-up.
    let e = parse_err(&format!(
        "{head}[[events]]\nstart_h = nan\nfault = {{ kind = \"comms-loss\" }}\n"
    ));
    assert!(e.contains("events[0].start_h"), "{e}");
    let e = parse_err(&format!(
        "{head}[[events]]\nstart_h = 1.0\nend_h = nan\nfault = {{ kind = \"comms-loss\" }}\n"
    ));
    assert!(e.contains("events[0].end_h"), "{e}");
    let e = parse_err(&format!(
        "{head}warmup_h = 24.0\n[[events]]\nstart_h = -30.0\nfault = {{ kind = \"comms-loss\" }}\n"
    ));
    assert!(e.contains("events[0].start_h") && e.contains("-30"), "{e}");
    // The second event is the bad one: the index is right.
    let e = parse_err(&format!(
        "{head}[[events]]\nstart_h = 1.0\nfault = {{ kind = \"comms-loss\" }}\n[[events]]\nstart_h = 2.0\nfault = {{ kind = \"heat-wave\", offset_k = -40.0 }}\n"
    ));
    assert!(e.contains("events[1].fault.offset_k"), "{e}");
}

#[test]
fn unbounded_input_files_are_refused_after_a_bounded_read() {
    if !Path::new("/dev/zero").exists() {
        return;
    }
    let head = "[scenario]\nname = \"x\"\nsite = \"/dev/zero\"\n";
    let e = parse_err(head);
    assert!(e.contains("/dev/zero") && e.contains("larger than"), "{e}");
    let head = "[scenario]\nname = \"x\"\nsite = \"hall-10k\"\n[weather]\nsource = \"/dev/zero\"\n";
    let e = parse_err(head);
    assert!(e.contains("/dev/zero") && e.contains("larger than"), "{e}");
}

#[test]
fn series_show_the_weather_the_plant_saw_with_the_heat_wave() {
    let base = spec(0.25, 0.0);
    let mut hot = base.clone();
    hot.events.push(EventSpec {
        start_h: 2.0,
        end_h: Some(4.0),
        fault: FaultKind::HeatWave { offset_k: 6.0 },
    });
    let (a, b) = (run_spec(&base, "vendor-default"), run_spec(&hot, "vendor-default"));
    assert_eq!(a.series.rows.len(), b.series.rows.len());
    let mut inside = 0;
    for (x, y) in a.series.rows.iter().zip(&b.series.rows) {
        assert_eq!(x.t_h, y.t_h);
        // A row is recorded after its step; the step ending at t_h ran over (t_h − step, t_h].
        let step_h = base.scenario.step_s / 3600.0;
        let t0 = y.t_h - step_h;
        let offset = if (2.0 - 1e-9..4.0 - 1e-9).contains(&t0) {
            6.0
        } else {
            0.0
        };
        inside += (offset > 0.0) as usize;
        assert!(
            (y.dry_bulb_c - x.dry_bulb_c - offset).abs() < 1e-9,
            "t {} h: {} vs {}",
            y.t_h,
            y.dry_bulb_c,
            x.dry_bulb_c
        );
        assert!((y.wet_bulb_c - x.wet_bulb_c - offset).abs() < 1e-9);
    }
    assert!(inside > 0);
}

#[test]
fn shipped_scenarios_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&p).unwrap();
            ScenarioSpec::from_toml_str(&p.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 5, "{n} scenarios");
}

#[test]
fn beijing_typical_week_both_baselines_hold_zero_throttle() {
    let Some(data) = data_dir() else { return };
    let mut s = ScenarioSpec::default_for_site("hall-10k");
    s.weather.source = data.join("CHN_Beijing.Beijing.545110_IWEC.epw").display().to_string();
    s.weather.period = "typical-week".into();
    let vd = run_spec(&s, "vendor-default").report;
    let tr = run_spec(&s, "trim-respond").report;
    for r in [&vd, &tr] {
        assert_eq!(r.kpis.throttle_gpu_s, 0.0, "{}", r.policy);
        assert_eq!(r.kpis.gpu_shutdowns, 0, "{}", r.policy);
        assert!(r.checks.all_ok());
    }
    assert!(tr.kpis.cooling_energy_kwh < vd.kpis.cooling_energy_kwh);
}

/// Tucson in October: after its learning day `coordinated` holds the adiabatic assist on (the
/// plan says so, the controller passes it on with an event, the plant runs the pads from then
/// on and counts their water), and nothing throttles.
#[test]
fn coordinated_chooses_the_heat_rejection_mode_and_the_plant_follows() {
    let Some(data) = data_dir() else { return };
    let mut s = spec(0.5, 24.0);
    s.weather.source = data
        .join("USA_AZ_Davis-Monthan.AFB.722745_TMY3.epw")
        .display()
        .to_string();
    s.weather.start_day = Some(278.0);
    let co = run_spec(&s, "coordinated");
    let first = co
        .plans
        .iter()
        .find(|p| {
            p.setpoints
                .is_some_and(|sp| sp.rejection_mode == RejectionMode::Adiabatic)
        })
        .expect("a plan holding the assist on");
    assert!(
        first
            .reasons
            .iter()
            .any(|r| r.contains("heat rejection auto → adiabatic")),
        "{:?}",
        first.reasons
    );
    let ev = co
        .events
        .iter()
        .find(|e| e.message.contains("heat-rejection mode auto -> adiabatic"))
        .expect("the controller's event");
    // The pads run from the plan on (as long as the mode stands) and use water.
    // (Series time counts from the end of the 24 h learning day; controller time from the start.)
    let after: Vec<_> = co
        .series
        .rows
        .iter()
        .filter(|r| (r.t_h + 24.0) * 3600.0 > ev.t_s + 120.0)
        .collect();
    assert!(!after.is_empty());
    let on = after.iter().filter(|r| r.adiabatic_on > 0.5).count();
    assert!(on * 10 >= after.len() * 9, "assist on in {on} of {} rows", after.len());
    let k = &co.report.kpis;
    assert!(k.water_l > 0.0 && k.throttle_gpu_s == 0.0 && k.gpu_shutdowns == 0);
    assert!(co.report.checks.all_ok());
}

/// Singapore's peak-heat week (day 154): the air handlers' chillers run (no free cooling above
/// 19 °C), so `coordinated` keeps the facility water 3 K rather than 1 K beyond what the CDUs'
/// heat exchangers need, and every plan says so with the chillers' metered power; the facility
/// setpoint it plans sits at least 3 K + the exchangers' approach below the CDU supply.
#[test]
fn coordinated_keeps_the_facility_water_further_below_the_cdus_while_the_chillers_run() {
    let Some(data) = data_dir() else { return };
    let mut s = spec(0.25, 24.0);
    s.weather.source = data.join("SGP_Singapore.486980_IWEC.epw").display().to_string();
    s.weather.start_day = Some(154.0);
    let co = run_spec(&s, "coordinated");
    let plans: Vec<_> = co.plans.iter().filter(|p| p.status == "optimised").collect();
    assert!(plans.len() >= 20, "{} plans", plans.len());
    for p in &plans {
        let line = p
            .reasons
            .iter()
            .find(|r| r.starts_with("the chillers draw "))
            .unwrap_or_else(|| panic!("no chillers' margin at {} h: {:?}", p.t_s / 3600.0, p.reasons));
        assert!(line.contains("at least 3.0 K below"), "{line}");
        let sp = p.setpoints.expect("setpoints");
        assert!(
            sp.facility_supply_c <= sp.cdu_supply_c - 3.0 - 1.0,
            "{:?} at {} h",
            sp,
            p.t_s / 3600.0
        );
    }
}

/// Beijing's peak-heat week (day 194), two days after a 48 h warm-up (the learning day and the
/// settling day after it are outside the scored days): with an allowance of one setpoint write
/// per CDU a week (12 on hall-10k), the settling day's plans say they are outside it, and every
/// move after it, chosen or forced by the limits, leaves
/// enough of the allowance to undo it (each plan says how much is left) unless no move within it
/// restores the limits (the plan says so), and the devices see at most the allowance plus the
/// writes of such moves, where the same policy without it writes far more.
#[test]
fn coordinated_keeps_its_setpoint_writes_within_the_weeks_allowance() {
    let Some(data) = data_dir() else { return };
    let mut s = spec(2.0, 48.0);
    s.weather.source = data.join("CHN_Beijing.Beijing.545110_IWEC.epw").display().to_string();
    s.weather.start_day = Some(194.0);
    let free = run_spec(&s, "coordinated");
    let capped = run_spec(&s, "coordinated:write-budget=1");
    let (w_free, w_capped) = (free.report.kpis.setpoint_writes, capped.report.kpis.setpoint_writes);
    // The number after `key` in a plan line.
    let num = |line: &str, key: &str| -> u32 {
        let at = line.find(key).unwrap_or_else(|| panic!("no `{key}` in {line}")) + key.len();
        line[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number after `{key}` in {line}"))
    };
    let plans: Vec<_> = capped.plans.iter().filter(|p| p.status == "optimised").collect();
    assert!(plans.len() >= 150, "{} plans", plans.len());
    let (mut chosen, mut forced_in_window, mut settling) = (0, 0, 0);
    let (mut settle_moved, mut after_settling) = (false, true);
    // The first plan out of a fallback (the move out of the learning day, a return from stale
    // inputs) is not refused.
    let mut after_fallback = true;
    for p in &capped.plans {
        let first = std::mem::replace(&mut after_fallback, p.status != "optimised");
        if p.status != "optimised" || first {
            continue;
        }
        let said = |what: &str| p.reasons.iter().find(|r| r.starts_with(what));
        let line = said("write allowance: ")
            .unwrap_or_else(|| panic!("no allowance line at {} h: {:?}", p.t_s / 3600.0, p.reasons));
        // The first day of plans settles outside the allowance, and says so.
        if line.starts_with("write allowance: settling until ") {
            assert!(p.t_s < 48.0 * 3600.0 - 1.0, "settling at {} h: {line}", p.t_s / 3600.0);
            assert!(line.contains("outside the allowance of 12 writes a week"), "{line}");
            settling += 1;
            assert!(p.write_allowance.is_some_and(|a| a.settling), "{:?}", p.write_allowance);
            settle_moved |= said("CDU supply ").is_some_and(|r| r.contains(" setpoint writes)"));
            continue;
        }
        // The allowance starts after the settling day, whatever it moved.
        if std::mem::replace(&mut after_settling, false) {
            assert!(line.contains(": 0 of 12 setpoint writes used"), "{line}");
        }
        assert!(line.contains(" of 12 setpoint writes used"), "{line}");
        let left = num(line, "a week), ");
        // The plan carries the same standing for the daemon's metrics (after its move).
        let a = p.write_allowance.expect("an allowance in the plan");
        assert_eq!(a.allowance, 12);
        assert!(!a.settling, "{a:?} at {} h", p.t_s / 3600.0);
        assert!(
            a.used + a.left >= 12 && a.used >= 12 - left,
            "{a:?} with {left} left before: {line}"
        );
        let Some(mv) = said("CDU supply ").filter(|r| r.contains(" setpoint writes)")) else {
            continue;
        };
        let writes = num(mv, "% (");
        if said("the setpoints in force break a limit the plan keeps and no move").is_some() {
            // A move the limits force, beyond the allowance only because none within it
            // restores them: counted in it.
            if p.t_s >= 47.0 * 3600.0 {
                forced_in_window += writes;
            }
        } else {
            // Any other move (forced or chosen) leaves enough of the allowance to undo it.
            assert!(2 * writes <= left, "a move of {writes} writes with {left} left: {mv}");
            chosen += 1;
        }
    }
    assert!(chosen >= 1, "no move chosen within the allowance");
    assert!(settling >= 80, "{settling} plans of the settling day");
    assert!(settle_moved, "no move in the settling day");
    assert!(free.plans.iter().all(|p| p.write_allowance.is_none()));
    assert!(
        w_free > 2 * 12,
        "without an allowance: {w_free} writes (the cap would not bind)"
    );
    assert!(
        w_capped <= 12 + u64::from(forced_in_window),
        "{w_capped} writes with an allowance of 12 a week and {forced_in_window} forced ({w_free} without)"
    );
    assert!(
        w_capped < w_free / 2,
        "{w_capped} writes with the allowance, {w_free} without"
    );
    assert_eq!(capped.report.kpis.throttle_gpu_s, 0.0);
}

/// Tucson's peak-heat week (day 174) after a 48 h warm-up, with the allowance split: one write
/// per CDU a week for the CDUs, 50 a week for the hall's facility water system. The plans carry
/// both allowances and name the facility's; no CDU takes more than its allowance in the week and
/// the facility water system no more than its own. On the third afternoon the facility water
/// goes 24 → 26 °C and back within three hours (the cooling model's error); with `regret-h=12`
/// the plans remember it and refuse the facility setpoints halfway there or further while the
/// air is as it was (at least four plans say so, and every plan that says so holds water on the
/// near side of the halfway mark). The test checks the memory and the plans that keep it, not a
/// changed decision (RESULTS.md, "A hold is not a move"). Beijing's peak week, where the memory
/// was first measured (28 → 23 °C and back on the second afternoon), no longer undoes a move
/// since colder water is priced at the trim chiller's floor (RESULTS.md, "The trim chiller's
/// floor"); in this week too plans say the floor raised predictions.
#[test]
fn coordinated_splits_its_allowance_and_does_not_repeat_a_facility_move_it_undid() {
    let Some(data) = data_dir() else { return };
    let mut s = spec(7.0, 48.0);
    s.weather.source = data
        .join("USA_AZ_Davis-Monthan.AFB.722745_TMY3.epw")
        .display()
        .to_string();
    s.weather.start_day = Some(174.0);
    let plain = run_spec(&s, "coordinated:write-budget=1:facility-write-budget=50");
    let regret = run_spec(&s, "coordinated:write-budget=1:facility-write-budget=50:regret-h=12");
    let mut marks = Vec::new();
    let mut fac_used = 0;
    for p in regret.plans.iter().filter(|p| p.status == "optimised") {
        let after_settling = p.t_s >= 48.0 * 3600.0 + 1.0;
        if after_settling {
            let a = p.write_allowance.expect("allowance");
            let f = a.facility.expect("the facility's own allowance");
            assert_eq!((a.allowance, f.allowance), (12, 50), "{a:?}");
            // The CDUs never moved after the settling day: every write went to the facility's.
            assert_eq!(a.used, 0, "{a:?} at {} h", p.t_s / 3600.0);
            fac_used = fac_used.max(f.used);
            let line = p
                .reasons
                .iter()
                .find(|r| r.starts_with("write allowance: "))
                .expect("allowance line");
            assert!(
                line.contains("setpoint writes to the CDUs used") && line.contains("to the facility water systems"),
                "{line}"
            );
        }
        if let Some(line) = p
            .reasons
            .iter()
            .find(|r| r.starts_with("facility water not taken to or "))
        {
            let rest = &line["facility water not taken to or ".len()..];
            let below = rest.starts_with("below ");
            assert!(below || rest.starts_with("above "), "{line}");
            let mark: f64 = rest[6..]
                .split(' ')
                .next()
                .and_then(|x| x.parse().ok())
                .unwrap_or_else(|| panic!("no mark in {line}"));
            let sp = p.setpoints.expect("setpoints");
            if below {
                assert!(sp.facility_supply_c > mark, "{sp:?} with {line}");
            } else {
                assert!(sp.facility_supply_c < mark, "{sp:?} with {line}");
            }
            marks.push((p.t_s, mark));
        }
    }
    assert!(marks.len() >= 4, "{} plans remember an undone move", marks.len());
    // Tucson's hot afternoons: colder facility water than the dry coolers' fans can make is
    // priced at the trim chiller's floor where the air model predicts less, and plans say so.
    let floored = regret
        .plans
        .iter()
        .filter(|p| {
            p.reasons
                .iter()
                .any(|r| r.contains("raised to the trim chiller's floor"))
        })
        .count();
    assert!(
        floored >= 10,
        "{floored} plans raised a prediction to the trim chiller's floor"
    );
    assert!(
        fac_used >= 20 && u64::from(fac_used) == regret.report.kpis.setpoint_writes_max_facility,
        "the facility's allowance used {fac_used}, the plant counted {}",
        regret.report.kpis.setpoint_writes_max_facility
    );
    assert!(
        plain
            .plans
            .iter()
            .all(|p| !p.reasons.iter().any(|r| r.starts_with("facility water not taken"))),
        "no memory without regret-h"
    );
    for r in [&plain, &regret] {
        let k = &r.report.kpis;
        assert!(
            k.setpoint_writes_max_cdu <= 1,
            "{} writes to a CDU",
            k.setpoint_writes_max_cdu
        );
        assert!(
            k.setpoint_writes_max_facility <= 50,
            "{} facility writes",
            k.setpoint_writes_max_facility
        );
        assert_eq!(k.throttle_gpu_s, 0.0);
    }
}

/// Singapore's peak-heat week (day 154) after a 48 h warm-up: the firmware never stages the
/// assist while `coordinated` learns (trim-respond) or in its first day of plans, so the air model
/// has no samples of it on and cannot compare the modes. After that day the policy probes: a plan
/// says why and holds the assist on, the controller passes it with an event, the pads run, and
/// once the air model has its samples the probe ends (a plan says so) and the mode is chosen from
/// the model, within the probe's two hours. (Without the probe this week ran dry throughout and
/// lost 0.11 % to `vendor-default`; RESULTS.md.) The chillers' margin on the CDUs' approach is
/// held at 1 K here: at its default 3 K the colder facility water saturates the fans in the day
/// after the learning day, the firmware stages the assist by itself (37 h in) and there is
/// nothing to probe.
#[test]
fn coordinated_probes_the_assist_the_firmware_never_staged_and_then_chooses_the_mode() {
    let Some(data) = data_dir() else { return };
    let mut s = spec(0.25, 48.0);
    s.weather.source = data.join("SGP_Singapore.486980_IWEC.epw").display().to_string();
    s.weather.start_day = Some(154.0);
    let co = run_spec(&s, "coordinated:chiller-margin-k=1");
    let said = |p: &EnergyPlan, what: &str| p.reasons.iter().any(|r| r.starts_with(what));
    let start = co
        .plans
        .iter()
        .find(|p| said(p, "adiabatic probe: "))
        .unwrap_or_else(|| {
            let last = co.plans.last().expect("plans");
            panic!("no probe; the last plan: {:?}", last.reasons)
        });
    // Not before the firmware had its day (24 h of learning, then 24 h of plans).
    assert!(start.t_s >= 48.0 * 3600.0 - 1.0, "probe at {} h", start.t_s / 3600.0);
    assert_eq!(
        start.setpoints.map(|sp| sp.rejection_mode),
        Some(RejectionMode::Adiabatic),
        "{:?}",
        start.reasons
    );
    // Earlier plans said the mode was left to the firmware, and why.
    assert!(co
        .plans
        .iter()
        .filter(|p| p.status == "optimised" && p.t_s < start.t_s)
        .all(|p| said(p, "heat-rejection mode left to the firmware")));
    let ev = co
        .events
        .iter()
        .find(|e| e.message.contains("heat-rejection mode auto -> adiabatic"))
        .expect("the controller's event");
    assert!(ev.t_s >= start.t_s - 1.0);
    let end = co
        .plans
        .iter()
        .find(|p| p.t_s > start.t_s && said(p, "adiabatic probe ended"))
        .expect("the probe ends");
    assert!(
        end.t_s - start.t_s <= 2.0 * 3600.0 + 1.0,
        "{} h",
        (end.t_s - start.t_s) / 3600.0
    );
    assert!(
        end.reasons.iter().any(|r| r.contains("the mode is now chosen from it")),
        "{:?}",
        end.reasons
    );
    // The pads ran during the probe (series time counts from the end of the warm-up).
    let during: Vec<_> = co
        .series
        .rows
        .iter()
        .filter(|r| {
            let t = (r.t_h + 48.0) * 3600.0;
            t > ev.t_s + 120.0 && t < end.t_s - 60.0
        })
        .collect();
    assert!(!during.is_empty());
    assert!(during.iter().all(|r| r.adiabatic_on > 0.5));
    // After it, no plan leaves the mode to the firmware for want of samples.
    assert!(co
        .plans
        .iter()
        .filter(|p| p.t_s >= end.t_s)
        .all(|p| !said(p, "heat-rejection mode left to the firmware")));
    let k = &co.report.kpis;
    assert!(k.water_l > 0.0 && k.throttle_gpu_s == 0.0 && k.gpu_shutdowns == 0);
    assert!(co.report.checks.all_ok());
}

#[test]
fn real_traces_drive_the_cluster() {
    let Some(data) = data_dir() else { return };
    let mut s = spec(1.0, 2.0);
    s.workload.kind = "helios".into();
    s.workload.path = Some(data.join("cluster_sequence_vc.csv").display().to_string());
    s.workload.duty_cycle = Some(data.join("pod_gpu_duty_cycle_anon.tar.gz").display().to_string());
    let r = run_spec(&s, "vendor-default");
    let busy: f64 = r.series.rows.iter().map(|x| x.busy_gpus).sum::<f64>() / r.series.rows.len() as f64;
    // The Helios group of May 2020 ran at 60–100 % occupancy; the scaled workload must too.
    assert!(busy > 0.5 * 10_368.0 && busy <= 10_368.0, "{busy}");
    assert!(r.report.checks.all_ok());
}

/// The coordinated policy on hall-10k: a day of learning under trim-respond, then 12 h
/// optimised. It must use less facility energy per unit of work than vendor-default on the same
/// scenario with zero throttling, explain every plan, fall back (and say so) while a CDU is
/// offline, and predict the next hour's facility power within a few per cent.
#[test]
fn coordinated_saves_energy_per_work_explains_and_falls_back_on_stale_data() {
    let mut s = spec(0.5, 24.0);
    let vd = run_spec(&s, "vendor-default");
    s.events.push(EventSpec {
        start_h: 3.0,
        end_h: Some(5.0),
        fault: FaultKind::CduOffline { cdu: 0 },
    });
    let co = run_spec(&s, "coordinated");
    let per_work =
        |r: &coolplane_scenario::RunResult| r.report.kpis.facility_energy_kwh / r.report.kpis.work_done_gpu_s;
    let (a, b) = (per_work(&vd), per_work(&co));
    assert!(b < a * 0.998, "coordinated {b:e} vs vendor-default {a:e} kWh per GPU-s");
    let k = &co.report.kpis;
    assert_eq!(k.throttle_gpu_s, 0.0);
    assert_eq!(k.gpu_shutdowns, 0);
    assert!(co.report.checks.all_ok(), "{:?}", co.report.checks);
    assert!(k.cooling_energy_kwh < vd.report.kpis.cooling_energy_kwh, "cooling");
    // Plans: learning first, then optimised ones, each with its reasons and binding constraint.
    let plans = &co.plans;
    assert!(
        plans[0].status == "fallback" && plans[0].binding.contains("learning"),
        "{:?}",
        plans[0]
    );
    let opt: Vec<_> = plans.iter().filter(|p| p.status == "optimised").collect();
    assert!(opt.len() >= 30, "{} optimised plans", opt.len());
    for p in &opt {
        let pred = p.predicted.expect("prediction");
        assert!(pred.facility_kw.is_finite() && pred.hottest_gpu_c.is_finite(), "{p:?}");
        assert!(!p.reasons.is_empty() && p.binding.contains("flow"), "{p:?}");
        // The heat-rejection mode is part of every choice and of its explanation.
        assert!(p.setpoints.is_some(), "{p:?}");
        assert!(p.reasons.iter().any(|r| r.contains("heat rejection")), "{p:?}");
    }
    // A mode the plans chose reached the hall through the controller (an event per change).
    let chosen: Vec<_> = opt
        .iter()
        .filter_map(|p| p.setpoints)
        .map(|sp| sp.rejection_mode)
        .filter(|m| *m != coolplane_core::signals::RejectionMode::Auto)
        .collect();
    // (This synthetic summer never runs the assist while learning: the plans say the mode is
    // left to the firmware; the Tucson test below covers a choice.)
    if let Some(m) = chosen.first() {
        let want = format!("heat-rejection mode auto -> {}", m.name());
        assert!(co.events.iter().any(|e| e.message.contains(&want)), "no event `{want}`");
    } else {
        assert!(
            opt.iter().any(|p| p
                .reasons
                .iter()
                .any(|r| r.starts_with("heat-rejection mode left to the firmware"))),
            "no plan chose a mode and none says why"
        );
    }
    // CDU 0 offline from 27 h to 29 h: fallback plans name it, and optimisation resumes after.
    let during: Vec<_> = plans
        .iter()
        .filter(|p| p.t_s >= 27.2 * 3600.0 && p.t_s < 29.0 * 3600.0)
        .collect();
    assert!(!during.is_empty());
    for p in &during {
        assert_eq!(p.status, "fallback", "{p:?}");
        assert!(p.binding.contains("CDU 0"), "{p:?}");
    }
    assert!(plans.iter().any(|p| p.t_s > 29.5 * 3600.0 && p.status == "optimised"));
    let acc = co.report.plan_accuracy.expect("plan accuracy");
    assert!(acc.scored >= 20, "{acc:?}");
    assert!(acc.facility_mape_pct < 8.0, "{acc:?}");
    assert!(acc.hottest_gpu_mae_k < 3.0, "{acc:?}");
}

/// `ahead-h`: candidates are judged over the coming hours of outdoor air, forecast from the
/// policy's own record of the day before, once it has one (every plan from the first says how
/// many hours came from it); off by default; in Beijing's peak week the moves the hour's air
/// asks for and the afternoon's undoes are fewer.
#[test]
fn coordinated_judges_its_moves_over_the_hours_ahead_where_asked() {
    let Some(data) = data_dir() else { return };
    let mut s = spec(2.0, 48.0);
    s.weather.source = data.join("CHN_Beijing.Beijing.545110_IWEC.epw").display().to_string();
    s.weather.start_day = Some(194.0);
    let now = run_spec(&s, "coordinated");
    let ahead = run_spec(&s, "coordinated:ahead-h=24");
    let one_stage = run_spec(&s, "coordinated:ahead-h=24:ahead-stages=1");
    let judged = |p: &&EnergyPlan| {
        p.reasons
            .iter()
            .find(|r| r.starts_with("candidates judged over the next 24 h of outdoor air"))
            .cloned()
    };
    assert!(
        now.plans.iter().filter_map(|p| judged(&p)).next().is_none(),
        "without ahead-h the plans judge the air now only"
    );
    let plans: Vec<_> = ahead.plans.iter().filter(|p| p.status == "optimised").collect();
    assert!(plans.len() >= 200, "{} plans", plans.len());
    for p in &plans {
        let line = judged(p).unwrap_or_else(|| panic!("no forecast line at {} h: {:?}", p.t_s / 3600.0, p.reasons));
        // The policy has recorded the air since its first tick: a day later every hour ahead
        // comes from the record.
        assert!(line.contains("(23 of 23 from the record"), "{line}");
    }
    assert!(
        plans
            .iter()
            .flat_map(|p| &p.reasons)
            .any(|r| r.starts_with("holding ") && r.contains(" over the next 24 h of outdoor air")),
        "no hold judged over the hours ahead"
    );
    let w = |r: &coolplane_scenario::RunResult| r.report.kpis.setpoint_writes;
    let (w_now, w_ahead, w_one) = (w(&now), w(&ahead), w(&one_stage));
    eprintln!("writes: {w_now} on the air now, {w_ahead} over the next 24 h in two stages, {w_one} in one");
    assert!(
        w_ahead < w_now,
        "{w_ahead} writes judged over the hours ahead, {w_now} on the air now"
    );
    assert!(
        w_one < w_now,
        "{w_one} writes judged over the hours ahead in one stage, {w_now} on the air now"
    );
    // The two judge differently (the facility setpoint chosen again each hour, or held).
    assert!(
        ahead
            .plans
            .iter()
            .zip(&one_stage.plans)
            .any(|(a, b)| a.setpoints != b.setpoints),
        "the two stages chose the same setpoints at every plan"
    );
    for r in [&now, &ahead, &one_stage] {
        assert_eq!(r.report.kpis.throttle_gpu_s, 0.0);
        assert_eq!(r.report.kpis.gpu_shutdowns, 0);
    }
}

/// A return from a fallback after the first plan (CDU 0 offline from 27 h to 29 h) is counted in
/// the week's write allowance; the first move out of the learning day is not (no settling day
/// here, `settle-h=0`: the fallback would fall in it).
#[test]
fn coordinated_counts_a_return_from_a_fallback_in_its_write_allowance() {
    let mut s = spec(0.5, 24.0);
    s.events.push(EventSpec {
        start_h: 3.0,
        end_h: Some(5.0),
        fault: FaultKind::CduOffline { cdu: 0 },
    });
    let co = run_spec(&s, "coordinated:write-budget=1000:settle-h=0");
    let used = |p: &EnergyPlan| -> Option<u32> {
        let r = p.reasons.iter().find(|r| r.starts_with("write allowance: "))?;
        r["write allowance: ".len()..].split(' ').next()?.parse().ok()
    };
    let writes = |p: &EnergyPlan| -> u32 {
        let r = p
            .reasons
            .iter()
            .find(|r| r.starts_with("CDU supply ") && r.ends_with(" setpoint writes)"))
            .unwrap_or_else(|| panic!("no move at {} h: {:?}", p.t_s / 3600.0, p.reasons));
        let n = r
            .rsplit('(')
            .next()
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok());
        n.unwrap_or_else(|| panic!("{r}"))
    };
    let opt: Vec<_> = co.plans.iter().filter(|p| p.status == "optimised").collect();
    // The first plan: nothing used, and its move is not counted by the next one.
    assert_eq!(used(opt[0]), Some(0), "{:?}", opt[0].reasons);
    assert!(writes(opt[0]) > 0, "the first plan moved nothing");
    assert_eq!(used(opt[1]), Some(0), "{:?}", opt[1].reasons);
    let before = opt
        .iter()
        .rfind(|p| p.t_s < 27.0 * 3600.0)
        .expect("a plan before the fallback");
    let back = opt.iter().position(|p| p.t_s > 29.0 * 3600.0).expect("a plan after it");
    let (back_plan, next) = (opt[back], opt.get(back + 1).expect("a plan after the return"));
    let w_back = writes(back_plan);
    assert!(w_back > 0, "the return moved nothing: {:?}", back_plan.reasons);
    let (u0, u1) = (used(back_plan).expect("allowance"), used(next).expect("allowance"));
    assert!(
        used(before).expect("allowance") <= u0,
        "the allowance used fell over the fallback"
    );
    assert_eq!(
        u1,
        u0 + w_back,
        "{u0} used at the return, {u1} after it ({w_back} writes)"
    );
}

/// Once a day and a half of load history exists, `coordinated`'s plans carry a load forecast
/// and predict the hour's powers at it: every such plan says so, earlier ones say why not, and
/// the forecast makes the plan's facility prediction better than the same plans at today's load.
#[test]
fn coordinated_plans_the_hour_at_its_load_forecast() {
    let s = spec(8.0 / 24.0, 44.0);
    let co = run_spec(&s, "coordinated");
    let opt: Vec<&EnergyPlan> = co.plans.iter().filter(|p| p.status == "optimised").collect();
    // Trained at the first six-hourly refit with 36 h of history: none before 36 h, one from
    // the refit at 42 h at the latest.
    let early: Vec<&EnergyPlan> = opt.iter().copied().filter(|p| p.t_s < 36.0 * 3600.0 - 1.0).collect();
    let late: Vec<&EnergyPlan> = opt.iter().copied().filter(|p| p.t_s > 42.5 * 3600.0).collect();
    assert!(
        !early.is_empty() && late.len() >= 30,
        "{} / {}",
        early.len(),
        late.len()
    );
    for p in &early {
        assert!(p.load_forecast.is_none(), "{p:?}");
        assert!(p.reasons.iter().any(|r| r.contains("no load forecast yet")), "{p:?}");
    }
    for p in &late {
        let lf = p
            .load_forecast
            .unwrap_or_else(|| panic!("no forecast at {} h", p.t_s / 3600.0));
        assert!(lf.it_next_hour_kw > 0.0 && lf.it_1h_p90_kw >= lf.it_1h_p50_kw, "{lf:?}");
        assert!(
            p.reasons.iter().any(|r| r.starts_with("load forecast: site IT")),
            "{p:?}"
        );
    }
    // The same plans at today's load (the prediction unscaled), scored the same way.
    let realised: Vec<f64> = co.series.rows.iter().map(|r| r.facility_kw).collect();
    let hot: Vec<f64> = co.series.rows.iter().map(|r| r.gpu_temp_max_c).collect();
    let with: Vec<EnergyPlan> = late.iter().map(|p| (*p).clone()).collect();
    let without: Vec<_> = with
        .iter()
        .cloned()
        .map(|mut p| {
            let lf = p.load_forecast.unwrap();
            let r = lf.it_next_hour_kw / lf.it_now_kw;
            if let Some(x) = p.predicted.as_mut() {
                x.facility_kw /= r;
            }
            p
        })
        .collect();
    let dt = s.scenario.step_s;
    let all = plan_accuracy(&co.plans, &realised, &hot, dt);
    let reported = co.report.plan_accuracy.expect("accuracy");
    assert!(
        (all.facility_mape_pct - reported.facility_mape_pct).abs() < 1e-9,
        "the series lines up with the run's own scoring: {all:?} vs {reported:?}"
    );
    let (a, b) = (
        plan_accuracy(&with, &realised, &hot, dt),
        plan_accuracy(&without, &realised, &hot, dt),
    );
    println!("facility MAPE with the load forecast {a:?}, at today's load {b:?}");
    assert!(a.scored >= 25 && a.scored == b.scored, "{a:?} {b:?}");
    assert!(a.facility_mape_pct < b.facility_mape_pct, "{a:?} vs {b:?}");
}

/// The oracle searches copies of the true plant every hour: over six hours of hall-10k it must
/// use no more facility energy per unit of work than vendor-default, never throttle, and say
/// what it is in its reasons. The daemon refuses it: it never runs against equipment.
#[test]
fn oracle_is_a_simulation_only_reference_that_does_not_lose_to_the_baseline() {
    let s = spec(0.25, 2.0);
    let vd = run_spec(&s, "vendor-default");
    let or = run_spec(&s, "oracle");
    let per_work =
        |r: &coolplane_scenario::RunResult| r.report.kpis.facility_energy_kwh / r.report.kpis.work_done_gpu_s;
    assert!(per_work(&or) <= per_work(&vd), "{} vs {}", per_work(&or), per_work(&vd));
    assert_eq!(or.report.kpis.throttle_gpu_s, 0.0);
    assert_eq!(or.report.policy, "oracle");
    // Held CDUs: the search moves only the facility water and the mode; the CDUs sit at the
    // held setpoints from its first hour.
    let held = run_spec(&s, "oracle:cdu-supply=37:cdu-flow=0.8");
    assert_eq!(held.report.policy, "oracle:cdu-supply=37:cdu-flow=0.8");
    let after: Vec<_> = held.series.rows.iter().filter(|r| r.t_h > -1.0).collect();
    assert!(!after.is_empty());
    for (r, v) in after.iter().zip(vd.series.rows.iter().filter(|r| r.t_h > -1.0)) {
        assert!(
            (r.cdu_supply_setpoint_mean_c - 37.0).abs() < 1e-9,
            "{} h: {} °C",
            r.t_h,
            r.cdu_supply_setpoint_mean_c
        );
        // vendor-default runs the design flow: the held run 80 % of it (as measured).
        let ratio = r.cdu_flow_total_lpm / v.cdu_flow_total_lpm;
        assert!((ratio - 0.8).abs() < 0.03, "{} h: flow {ratio:.3} of design", r.t_h);
    }
    assert_eq!(held.report.kpis.throttle_gpu_s, 0.0);
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/daemon.toml")).unwrap();
    for policy in ["oracle", "oracle:cdu-supply=37:cdu-flow=0.8"] {
        let e = coolplane_runtime::DaemonConfig::from_toml_str(
            "daemon.toml",
            &text.replace("policy = \"trim-respond\"", &format!("policy = \"{policy}\"")),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("oracle") && e.contains("never runs against equipment"),
            "{e}"
        );
    }
}

/// A daemon configuration whose tank guard acts at or below where `coordinated` plans the tanks'
/// pressure is refused before any device is opened, naming both settings; the shipped example
/// with `coordinated` and the default guard is accepted.
#[test]
fn the_daemon_refuses_a_tank_guard_below_the_policys_tank_band() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/daemon.toml")).unwrap();
    let co = text.replace("policy = \"trim-respond\"", "policy = \"coordinated\"");
    coolplane_runtime::DaemonConfig::from_toml_str("daemon.toml", &co).unwrap();
    let low = co.replace("[controller]\n", "[controller]\ntank_guard_frac = 0.4\n");
    assert_ne!(low, co);
    let e = coolplane_runtime::DaemonConfig::from_toml_str("daemon.toml", &low)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tank-pressure-frac = 0.4") && e.contains("controller.tank_guard_frac = 0.4"),
        "{e}"
    );
    let ok = low.replace(
        "policy = \"coordinated\"",
        "policy = \"coordinated:tank-pressure-frac=0.3\"",
    );
    coolplane_runtime::DaemonConfig::from_toml_str("daemon.toml", &ok).unwrap();

    // The scenario harness makes the same check before the plant is built.
    let mut s = spec(0.05, 0.0);
    s.scenario.site = "supernode-2pic".into();
    let sc = s.resolve(Path::new(".")).expect("scenario resolves");
    let mut opts = RunOptions::default();
    opts.controller.tank_guard_frac = 0.4;
    let refused = |p: &str, opts: &RunOptions| {
        coolplane_scenario::run(&sc, coolplane_policies::by_name(p).unwrap(), opts, &mut |_| {})
            .err()
            .map(|e| e.to_string())
    };
    let e = refused("coordinated", &opts).expect("a tank band at the guard was run");
    assert!(
        e.contains("tank-pressure-frac = 0.4") && e.contains("controller.tank_guard_frac = 0.4"),
        "{e}"
    );
    assert_eq!(refused("coordinated:tank-pressure-frac=0.3", &opts), None);
    opts.controller.tank_guard_frac = 1.5;
    let e = refused("trim-respond", &opts).expect("a guard above the relief pressure was run");
    assert!(e.contains("controller.tank_guard_frac"), "{e}");
}

/// supernode-2pic (two-phase immersion): after its learning day `coordinated` chooses the
/// tanks' condenser water, colder and at less flow, with every tank's pool at the heat it is
/// planned at (its highest of the last hour plus 5 %) kept within 40 % of its relief pressure. The skid pumps draw far less than under
/// vendor-default, facility energy per unit of work falls below both baselines, nothing
/// throttles or vents, and the plans say in the tanks' terms what binds.
#[test]
fn coordinated_runs_two_phase_tanks_on_colder_condenser_water_and_less_flow() {
    let mut s = spec(0.5, 24.0);
    s.scenario.site = "supernode-2pic".into();
    let vd = run_spec(&s, "vendor-default");
    let tr = run_spec(&s, "trim-respond");
    let co = run_spec(&s, "coordinated");
    let per_work =
        |r: &coolplane_scenario::RunResult| r.report.kpis.facility_energy_kwh / r.report.kpis.work_done_gpu_s;
    let (a, b, c) = (per_work(&vd), per_work(&tr), per_work(&co));
    assert!(
        c < a.min(b),
        "coordinated {c:e} vs vendor-default {a:e}, trim-respond {b:e} kWh per GPU-s"
    );
    let k = &co.report.kpis;
    assert!(
        k.cdu_pump_energy_kwh < 0.8 * vd.report.kpis.cdu_pump_energy_kwh,
        "skid pumps {} vs {} kWh",
        k.cdu_pump_energy_kwh,
        vd.report.kpis.cdu_pump_energy_kwh
    );
    assert_eq!(k.throttle_gpu_s, 0.0);
    assert_eq!(k.gpu_shutdowns, 0);
    assert_eq!(k.fluid_vented_kg, 0.0);
    assert!(co.report.checks.all_ok(), "{:?}", co.report.checks);
    let opt: Vec<_> = co.plans.iter().filter(|p| p.status == "optimised").collect();
    assert!(opt.len() >= 30, "{} optimised plans", opt.len());
    assert!(
        opt.iter()
            .filter_map(|p| p.setpoints)
            .any(|sp| sp.cdu_flow_frac < 0.95 && sp.cdu_supply_c < 38.0),
        "no plan chose colder condenser water at less flow"
    );
    assert!(
        opt.iter()
            .any(|p| p.binding.contains("would let a tank at") && p.binding.contains("(the heat it is planned at)")),
        "no plan names the tanks' pressure as what binds"
    );
    // The full-load limit acts: held just above the band (a tank going to design heat may
    // settle at 41 % of its relief pressure, planned at 40 %), it is what binds, and the plans
    // say so.
    let tight = run_spec(&s, "coordinated:tank-full-frac=0.41");
    let said = |r: &coolplane_scenario::RunResult| {
        r.plans
            .iter()
            .filter(|p| p.status == "optimised" && p.binding.contains("(its design heat, were it to go there)"))
            .count()
    };
    let tight_opt = tight.plans.iter().filter(|p| p.status == "optimised").count();
    assert!(
        said(&tight) * 2 > tight_opt,
        "the full-load limit binds in {} of {tight_opt} plans",
        said(&tight)
    );
    assert_eq!(tight.report.kpis.fluid_vented_kg, 0.0);
}

/// A tank's pressure gauge drifting high after the learning day: `coordinated` reads the tank as
/// over the pressure it allows, asks only for colder condenser water or more flow while it is,
/// and once nothing relieving is left holds the coldest water and fullest flow in range (never
/// design, which would be warmer water at less flow).
#[test]
fn coordinated_relieves_a_tank_reading_over_its_limit_and_holds_the_coldest_water_not_design() {
    let mut s = spec(0.5, 24.0);
    s.scenario.site = "supernode-2pic".into();
    s.events.push(EventSpec {
        start_h: 1.0,
        end_h: None,
        fault: FaultKind::Sensor {
            point: SensorPoint::TankPressure(0),
            failure: SensorFailure::Drift { rate_per_h: 0.5 },
        },
    });
    let co = run_spec(&s, "coordinated");
    let k = &co.report.kpis;
    assert_eq!(k.throttle_gpu_s, 0.0);
    assert_eq!(k.fluid_vented_kg, 0.0);
    let opt: Vec<&EnergyPlan> = co.plans.iter().filter(|p| p.status == "optimised").collect();
    let over = |p: &EnergyPlan| p.reasons.iter().any(|r| r.starts_with("tank 0 is at"));
    let first_over = opt
        .iter()
        .position(|p| over(p))
        .expect("a plan reads tank 0 over its limit");
    // While the tank reads over, no plan asks for warmer water or less flow than the one before.
    for w in opt[first_over.max(1) - 1..].windows(2) {
        let (a, b) = (w[0].setpoints.expect("setpoints"), w[1].setpoints.expect("setpoints"));
        if over(w[1]) {
            assert!(
                b.cdu_supply_c <= a.cdu_supply_c + 1e-9 && b.cdu_flow_frac >= a.cdu_flow_frac - 1e-9,
                "at {} s: {:?} after {:?}",
                w[1].t_s,
                b,
                a
            );
        }
    }
    // Then nothing relieving is left: the coldest water and the fullest flow of the plans, held.
    let held: Vec<&&EnergyPlan> = opt
        .iter()
        .filter(|p| p.reasons.iter().any(|r| r.starts_with("no candidate that relieves")))
        .collect();
    assert!(!held.is_empty(), "no plan ran out of relieving candidates");
    let coldest = opt
        .iter()
        .filter_map(|p| p.setpoints)
        .map(|x| x.cdu_supply_c)
        .fold(f64::INFINITY, f64::min);
    let fullest = opt
        .iter()
        .filter_map(|p| p.setpoints)
        .map(|x| x.cdu_flow_frac)
        .fold(0.0, f64::max);
    for p in held {
        let sp = p.setpoints.expect("setpoints");
        assert_eq!(
            (sp.cdu_supply_c, sp.cdu_flow_frac),
            (coldest, fullest),
            "at {} s",
            p.t_s
        );
        assert_eq!(sp.rejection_mode, RejectionMode::Auto);
    }
}

/// A tank's pressure gauge drifting low on the simulated plant (its noise, its 0.1 K pool
/// thermometer): the controller's cross-check against the pool temperature through the fluid's
/// saturation curve names that tank once the drift passes the tolerance, and no healthy tank in
/// two days of the plant's sensor noise (15 tanks).
#[test]
fn a_tank_gauge_drifting_low_is_named_by_the_pool_thermometer_and_no_healthy_tank_is() {
    let mut s = spec(2.0, 0.0);
    s.scenario.site = "supernode-2pic".into();
    let (start_h, rate) = (1.0, -0.5);
    s.events.push(EventSpec {
        start_h,
        end_h: None,
        fault: FaultKind::Sensor {
            point: SensorPoint::TankPressure(0),
            failure: SensorFailure::Drift { rate_per_h: rate },
        },
    });
    let r = run_spec(&s, "trim-respond");
    let k = &r.report.kpis;
    assert_eq!(k.throttle_gpu_s, 0.0);
    assert_eq!(k.fluid_vented_kg, 0.0);
    let parted: Vec<_> = r
        .events
        .iter()
        .filter(|e| e.message.contains("one of them is wrong"))
        .collect();
    assert!(
        parted.iter().all(|e| e.message.starts_with("2pic-hall-cdu-01:")),
        "a healthy tank named: {parted:?}"
    );
    let first = parted.first().expect("the drifting gauge is named");
    eprintln!(
        "tank 0's drifting gauge named at {} s; {} such events",
        first.t_s,
        parted.len()
    );
    // The drift passes the 1 kPa tolerance 2 h after it starts (the sensors' noise moves that
    // by a fraction of an hour, not more).
    let due_s = (start_h + coolplane_policies::TANK_CROSSCHECK_KPA / -rate) * 3600.0;
    assert!(
        (first.t_s - due_s).abs() <= 1800.0,
        "named at {} s, the drift passes the tolerance at {due_s} s",
        first.t_s
    );
}

/// The weekly wear of a tenth of `trim-respond`'s writes with 80 % of the oracle's saving, in the
/// steady state (RESULTS.md, "One configuration for both targets"): two writes per CDU a week and
/// 45 for the facility water, with the memory of undone moves, in Beijing's peak week, the row
/// where one write per CDU lost the share because it could not move a CDU at all (a move must
/// leave enough of the allowance to undo it). Fails with `write-budget=1` (0.558 % saved, 78 %).
#[test]
fn two_writes_per_cdu_keep_a_tenth_of_trim_respond_wear_and_the_oracles_share() {
    let Some(data) = data_dir() else { return };
    let mut s = ScenarioSpec::default_for_site("hall-10k");
    s.weather.source = data.join("CHN_Beijing.Beijing.545110_IWEC.epw").display().to_string();
    s.weather.period = "peak-heat-week".into();
    s.scenario.warmup_h = 48.0;
    s.scenario.step_s = 60.0;
    s.scenario.seed = 1;
    let vd = run_spec(&s, "vendor-default");
    let tr = run_spec(&s, "trim-respond");
    let co = run_spec(&s, "coordinated:write-budget=2:facility-write-budget=45:regret-h=12");
    let (k, t) = (&co.report.kpis, &tr.report.kpis);
    let saving = 1.0 - k.facility_kwh_per_gpu_h() / vd.report.kpis.facility_kwh_per_gpu_h();
    // The oracle's saving in this row, steady state, seed 1 (RESULTS.md, "A hard weekly
    // allowance of writes", "The oracle in the steady state"): 0.714 %.
    assert!(
        saving >= 0.8 * 0.00714,
        "saving {:.3} % against the oracle's 0.714 %",
        saving * 100.0
    );
    for (what, ours, theirs) in [
        ("total", k.setpoint_writes, t.setpoint_writes),
        (
            "facility water system",
            k.setpoint_writes_max_facility,
            t.setpoint_writes_max_facility,
        ),
        ("most-written CDU", k.setpoint_writes_max_cdu, t.setpoint_writes_max_cdu),
    ] {
        assert!(
            ours * 10 <= theirs,
            "{what}: {ours} writes against trim-respond's {theirs}"
        );
    }
    // The allowance is what lets the CDUs move: one move of all of them, inside the week.
    assert!(k.cdu_setpoint_writes > 0, "no CDU write: {k:?}");
    assert_eq!(k.throttle_gpu_s, 0.0);
    assert_eq!(k.near_throttle_gpu_s, 0.0);
    assert_eq!(k.gpu_shutdowns, 0);
}
