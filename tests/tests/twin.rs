//! The digital twin against the plant's truth: estimates, calibration recovering parameters
//! injected into the site, and sensor-fault detection. (Plant truth is allowed here, never in
//! the twin.)

use coolplane_core::signals::{Actions, CduCommand, FacilityCommand};
use coolplane_core::site::{builtin_site_toml, Site};
use coolplane_core::weather::WeatherSample;
use coolplane_sim_plant::faults::{FaultKind, ScheduledFault, SensorFailure, SensorPoint};
use coolplane_sim_plant::Plant;
use coolplane_twin::estimate::EstQuality;
use coolplane_twin::health::SensorId;
use coolplane_twin::{Nameplate, Twin, TwinConfig, TwinEventKind};

fn site_with(edits: &[(&str, &str)]) -> Site {
    let mut t = builtin_site_toml("hall-10k").unwrap().to_string();
    for (a, b) in edits {
        assert_eq!(t.matches(a).count(), 1, "`{a}` must occur once");
        t = t.replacen(a, b, 1);
    }
    Site::from_toml_str("edited.toml", &t).unwrap()
}

fn amb() -> WeatherSample {
    WeatherSample {
        dry_bulb_c: 22.0,
        wet_bulb_c: 16.0,
        dew_point_c: 12.0,
        rh_pct: 53.0,
        pressure_pa: 101_325.0,
    }
}

fn actions(plant: &Plant, flow_frac: f64, design_flow: f64) -> Actions {
    let topo = plant.topology();
    Actions {
        cdus: vec![
            CduCommand {
                heartbeat: true,
                flow_setpoint_lpm: Some(flow_frac * design_flow),
                ..Default::default()
            };
            topo.cdus.len()
        ],
        facilities: vec![
            FacilityCommand {
                heartbeat: true,
                ..Default::default()
            };
            topo.halls.len()
        ],
        ..Default::default()
    }
}

/// Run the plant with a load and flow that vary (so every parameter is identifiable) and feed
/// the twin every minute; `check` sees both after every step.
fn drive(
    site: &Site,
    seed: u64,
    hours: f64,
    faults: &[ScheduledFault],
    mut check: impl FnMut(&Plant, &Twin, usize),
) -> Twin {
    let mut plant = Plant::new(site, seed).unwrap();
    for f in faults {
        plant.schedule_fault(*f);
    }
    let np = Nameplate::from_site(site);
    let design_flow = np.cdu_design_flow_lpm[0];
    let mut twin = Twin::new(
        np,
        TwinConfig {
            learn_s: 12.0 * 3600.0,
            ..TwinConfig::default()
        },
    );
    let n_gpu = plant.topology().gpu_count;
    plant.ensure_slots(5);
    for g in 0..n_gpu {
        plant.assign_gpu(g as u32, 1 + (g / 72 % 4) as u32);
    }
    let steps = (hours * 60.0) as usize;
    for k in 0..steps {
        let t = k as f64 * 60.0;
        for s in 1..5u32 {
            let u = 0.55 + 0.4 * ((t / 3600.0 * (0.7 + 0.23 * s as f64)) + s as f64).sin();
            plant.set_slot_util(s, u as f32);
        }
        let flow = 0.8 + 0.2 * (t / 5400.0).sin();
        let a = actions(&plant, flow, design_flow);
        plant.step(60.0, &amb(), &a);
        twin.update(plant.measurements());
        check(&plant, &twin, k);
    }
    twin
}

#[test]
fn estimates_track_plant_truth_and_calibration_recovers_injected_parameters() {
    // Injected: heat-to-liquid 0.86 (hall-10k ships 0.92).
    let site = site_with(&[("heat_to_liquid = 0.92", "heat_to_liquid = 0.86")]);
    let mut heat_err = (0.0f64, 0.0f64);
    let mut worst_supply = 0.0f64;
    let mut worst_margin = 0.0f64;
    let mut ua_truth = (0.0f64, 0.0f64);
    let twin = drive(&site, 3, 20.0, &[], |plant, twin, k| {
        if !twin.calibrated() {
            for c in 0..site.halls[0].cdu.count as usize {
                ua_truth.0 += plant.true_cdu_ua_w_k(c);
                ua_truth.1 += 1.0;
            }
            return;
        }
        if k % 10 != 0 {
            return;
        }
        let est = twin.estimate();
        for (c, e) in est.cdus.iter().enumerate() {
            let truth_kw = plant.true_cdu_heat_in_w(c) / 1e3;
            heat_err.0 += (e.heat_to_liquid_kw.value - truth_kw).abs() / truth_kw;
            heat_err.1 += 1.0;
            worst_supply = worst_supply.max((e.supply_c.value - plant.true_cdu_supply_c(c)).abs());
        }
        let true_max = plant.true_gpu_temps_c().iter().copied().fold(f32::MIN, f32::max) as f64;
        let margin = est.halls[0].margin_k.value;
        worst_margin = worst_margin.max(((site.gpu.slowdown_c - true_max) - margin).abs());
    });
    assert!(twin.calibrated());
    let heat_mape = heat_err.0 / heat_err.1.max(1.0);
    eprintln!(
        "heat-to-liquid per CDU: {:?}; heat MAPE {heat_mape:.3}, worst supply {worst_supply:.2} K, margin {worst_margin:.2} K",
        twin.calibration().cdu_heat_to_liquid.iter().map(|p| p.value).collect::<Vec<_>>()
    );
    // A flow meter's gain error cannot be told apart from the heat-to-liquid fraction (both
    // scale ṁ c_p ΔT), so each CDU's estimate carries its flow meter's ~1 % gain error and noise.
    assert!(
        heat_mape < 0.04,
        "CDU heat into liquid off by {:.1} % on average",
        heat_mape * 100.0
    );
    assert!(worst_supply < 0.6, "CDU supply off by {worst_supply:.2} K");
    assert!(
        worst_margin < 4.0,
        "hall GPU margin off by {worst_margin:.2} K (sensor bias and integer °C included)"
    );
    for (c, p) in twin.calibration().cdu_heat_to_liquid.iter().enumerate() {
        assert!(
            (p.value - 0.86).abs() < 0.035,
            "CDU {c}: heat-to-liquid {:.3}, injected 0.86",
            p.value
        );
        assert!(p.lo <= p.value && p.value <= p.hi && p.hi - p.lo < 0.05, "{p:?}");
    }
    // UA at the learning window's mean flows against the plant's true UA over that window.
    // Temperature-sensor offsets over a 4–6 K log-mean difference move the estimate by tens of
    // per cent (identical CDUs scatter that much), so the band is wide; it catches a
    // calibration that is missing, negative or off by a factor.
    let true_ua_kw = ua_truth.0 / ua_truth.1.max(1.0) / 1e3;
    for (c, p) in twin.calibration().cdu_ua_kw_per_k.iter().enumerate() {
        eprintln!(
            "CDU {c}: UA {:.0} kW/K [{:.0}, {:.0}], true {true_ua_kw:.0}",
            p.value, p.lo, p.hi
        );
        assert!(p.value.is_finite() && p.value > 0.0 && p.lo < p.hi, "CDU {c}: UA {p:?}");
        assert!(
            (p.value / true_ua_kw - 1.0).abs() < 0.25,
            "CDU {c}: UA {:.0} kW/K, true {true_ua_kw:.0} kW/K over the learning window",
            p.value
        );
    }
    // Cold-plate resistance of the hottest GPU at design flow: the site's spread makes the
    // hottest GPU of a rack lie above the nominal R; it must be in the physical band.
    let cp = &site.cold_plate;
    for (r, p) in twin.calibration().rack_cold_plate_k_per_w.iter().enumerate() {
        assert!(p.value > cp.r_cond_k_per_w * 0.7 && p.value < 0.08, "rack {r}: R {p:?}");
    }
}

#[test]
fn a_drifting_sensor_is_flagged_and_a_clean_plant_raises_nothing() {
    let site = site_with(&[]);
    let faults = [ScheduledFault {
        start_s: 15.0 * 3600.0,
        end_s: None,
        fault: FaultKind::Sensor {
            point: SensorPoint::CduSupplyTemp(4),
            failure: SensorFailure::Drift { rate_per_h: 0.5 },
        },
    }];
    let mut twin = drive(&site, 9, 22.0, &faults, |_, _, _| {});
    let ev = twin.drain_events();
    let sensor: Vec<_> = ev
        .iter()
        .filter_map(|e| match e.kind {
            TwinEventKind::SensorImplausible { sensor, issue } => Some((e.t_s, sensor, issue)),
            _ => None,
        })
        .collect();
    assert!(
        sensor
            .iter()
            .any(|(t, s, _)| *s == SensorId::CduSupplyTemp(4) && *t > 15.0 * 3600.0 && *t < 20.0 * 3600.0),
        "drift not flagged within 5 h: {sensor:?}"
    );
    let wrong: Vec<_> = sensor
        .iter()
        .filter(|(_, s, _)| !matches!(s, SensorId::CduSupplyTemp(4) | SensorId::CduLoop(4)))
        .collect();
    assert!(wrong.is_empty(), "false alarms: {wrong:?}");
    // While flagged, the estimate is gap-filled from the racks' inlets.
    assert_eq!(twin.estimate().cdus[4].supply_c.quality, EstQuality::Modelled);
}

/// A two-phase immersion tank's pressure gauge drifting low (the fault that would hide a rising
/// tank) is flagged against its pool thermometer read through the fluid's saturation curve, and
/// no other tank's gauge is.
#[test]
fn a_tank_gauge_drifting_low_is_flagged_against_the_pool_thermometer() {
    let site = Site::from_toml_str("supernode-2pic.toml", builtin_site_toml("supernode-2pic").unwrap()).unwrap();
    let start_h = 15.0;
    let faults = [ScheduledFault {
        start_s: start_h * 3600.0,
        end_s: None,
        fault: FaultKind::Sensor {
            point: SensorPoint::TankPressure(3),
            failure: SensorFailure::Drift { rate_per_h: -0.5 },
        },
    }];
    let mut twin = drive(&site, 9, 24.0, &faults, |_, _, _| {});
    let sensor: Vec<_> = twin
        .drain_events()
        .iter()
        .filter_map(|e| match e.kind {
            TwinEventKind::SensorImplausible { sensor, issue } => Some((e.t_s, sensor, issue)),
            _ => None,
        })
        .collect();
    let flagged = sensor
        .iter()
        .find(|(_, s, _)| *s == SensorId::TankPressure(3))
        .unwrap_or_else(|| panic!("tank 3's gauge not flagged: {sensor:?}"));
    eprintln!(
        "tank 3's gauge flagged {:.2} h after the drift began",
        flagged.0 / 3600.0 - start_h
    );
    assert!(
        flagged.0 > start_h * 3600.0 && flagged.0 < (start_h + 7.0) * 3600.0,
        "flagged at {} s",
        flagged.0
    );
    let wrong: Vec<_> = sensor
        .iter()
        .filter(|(_, s, _)| matches!(s, SensorId::TankPressure(c) if *c != 3))
        .collect();
    assert!(wrong.is_empty(), "healthy gauges flagged: {wrong:?}");
}
