//! Physics tests of two-phase immersion (`coolplane_sim_plant::immersion`, plant-model.md §12),
//! on `supernode-2pic` cut down to two tanks: a tank's energy balance closes through independent
//! paths, the pool sits where the condenser equation puts it, a starved condenser raises the
//! pressure, the saturation temperature and every die together until the relief vents fluid,
//! fluid loss is counted, a surface above the critical heat flux dries out and its die runs
//! away into slowdown and shutdown, and the plant is deterministic.

use coolplane_core::dielectric::{fluid_by_name, P_ATM_PA};
use coolplane_core::fluid::{pg25_lpm_to_kg_s, PG25_CP_J_KG_K};
use coolplane_core::signals::{Actions, CduCommand, FacilityCommand};
use coolplane_core::site::{builtin_site_toml, Site};
use coolplane_core::topology::Topology;
use coolplane_core::weather::{self, WeatherSample};
use coolplane_sim_plant::immersion::Immersion;
use coolplane_sim_plant::{InjectedError, Plant};

/// supernode-2pic with `tanks` tanks (the hall's heat rejection and electrical chain unchanged:
/// oversized for fewer tanks, which these tests do not depend on).
fn two_phase_site(tanks: u32) -> Site {
    let t = builtin_site_toml("supernode-2pic").expect("built in");
    assert_eq!(t.matches("count = 16\n").count(), 1);
    let t = t.replacen("count = 16\n", &format!("count = {tanks}\n"), 1);
    Site::from_toml_str("2pic-small.toml", &t).expect("valid")
}

fn weather_at(dry_bulb_c: f64) -> WeatherSample {
    let dew = weather::dew_point_from_rh_c(dry_bulb_c, 50.0);
    WeatherSample {
        dry_bulb_c,
        wet_bulb_c: weather::wet_bulb_c(dry_bulb_c, dew, P_ATM_PA),
        dew_point_c: dew,
        rh_pct: 50.0,
        pressure_pa: P_ATM_PA,
    }
}

/// Every GPU in one job at utilisation `u`.
fn load(plant: &mut Plant, u: f32) {
    plant.ensure_slots(2);
    plant.set_slot_util(1, u);
    for g in 0..plant.topology().gpu_count {
        plant.assign_gpu(g as u32, 1);
    }
}

/// Heartbeats and the given condenser-water supply temperature and flow to every tank's skid.
fn actions(plant: &Plant, supply_c: f64, flow_lpm: f64) -> Actions {
    let topo = plant.topology();
    Actions {
        cdus: vec![
            CduCommand {
                supply_temp_setpoint_c: Some(supply_c),
                flow_setpoint_lpm: Some(flow_lpm),
                heartbeat: true,
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

fn design_flow_lpm(site: &Site) -> f64 {
    site.halls[0].cdu.design_flow_lpm()
}

fn hottest(plant: &Plant, cdu: usize) -> f32 {
    let r = plant.topology().cdus[cdu].racks.start;
    let gpus = plant.topology().racks[r].gpus.clone();
    plant.true_gpu_temps_c()[gpus].iter().copied().fold(f32::MIN, f32::max)
}

fn steady(plant: &mut Plant, a: &Actions, amb: &WeatherSample, hours: f64, dt: f64) {
    for _ in 0..(hours * 3600.0 / dt) as usize {
        plant.step(dt, amb, a);
    }
}

#[test]
fn tank_energy_balance_closes_and_the_pool_sits_where_the_condenser_puts_it() {
    let site = two_phase_site(2);
    let mut plant = Plant::new(&site, 7).unwrap();
    load(&mut plant, 1.0);
    let amb = weather_at(20.0);
    let a = actions(&plant, 38.0, design_flow_lpm(&site));
    steady(&mut plant, &a, &amb, 4.0, 10.0);
    plant.start_scoring();
    // Over one more hour: heat the boards put into each pool (the GPU kernel's rack power) against
    // heat the skid's plate HX passed to facility water (from its own ε-NTU temperatures and
    // flows) minus the skid pump's heat, plus what the pool stored and lost as vapour.
    let (mut it_j, mut hx_j, mut pump_j) = (0.0, 0.0, 0.0);
    let stored0 = plant.stored_heat_j();
    let dt = 10.0;
    for _ in 0..360 {
        plant.step(dt, &amb, &a);
        for c in 0..2 {
            let r = plant.topology().cdus[c].racks.start;
            let rack_w = plant.true_rack_power_w(r);
            it_j += rack_w * dt;
            hx_j += plant.true_cdu_hx_w(c) * dt;
            pump_j += (plant.true_cdu_heat_in_w(c) - rack_w) * dt;
        }
    }
    let k = plant.kpis();
    // The pool holds at steady state within a few hundredths of a kelvin: the stored term is
    // small; vapour losses are kilograms per year (≈ 1e-3 of the heat).
    let d_stored = plant.stored_heat_j() - stored0;
    let resid = (it_j + pump_j - hx_j).abs() / it_j;
    assert!(resid < 5e-3, "rack heat + pump heat vs HX heat: {resid:.2e}");
    assert!(d_stored.abs() < 2e-3 * it_j, "{d_stored}");
    assert!(k.energy_balance_error_pct < 0.01, "{}", k.energy_balance_error_pct);
    assert!(k.fluid_loss_kg > 0.0 && k.fluid_vented_kg == 0.0, "{k:?}");
    // The condenser: T_pool = T_w,in + Q / (ε·C_w), ε = 1 − exp(−UA/C_w), UA from the site's
    // coil data at the true flow. Computed here from the documented equations only.
    let im = &site.halls[0].immersion.as_ref().unwrap();
    let m_w = plant.true_cdu_flow_kg_s(0);
    let m_d = pg25_lpm_to_kg_s(design_flow_lpm(&site));
    let ua_d = im.condenser_ua_kw_per_k * 1000.0;
    let fw = im.condenser_water_side_frac;
    let ua = 1.0 / ((1.0 - fw) / ua_d + fw / ua_d * (m_d / m_w).powf(0.8));
    let c_w = m_w * PG25_CP_J_KG_K;
    let eps = 1.0 - (-ua / c_w).exp();
    let q = plant.true_rack_power_w(plant.topology().cdus[0].racks.start);
    let expected = plant.true_cdu_supply_c(0) + q / (eps * c_w);
    let pool = plant.immersion().unwrap().pool_temp_c(0).unwrap();
    assert!(
        (pool - expected).abs() < 0.15,
        "pool {pool:.2} °C, condenser equation {expected:.2} °C"
    );
    // At design the pool sits at about the boiling point (49 °C), dies ≈ 49 + 5 K + 0.12 K/W × 100 W.
    assert!((46.0..50.5).contains(&pool), "{pool}");
    let h = hottest(&plant, 0);
    assert!((60.0..75.0).contains(&h), "{h}");
}

#[test]
fn starved_condenser_raises_pressure_saturation_and_dies_together_then_the_relief_vents() {
    let site = two_phase_site(2);
    let relief = site.halls[0].immersion.as_ref().unwrap().relief_gauge_kpa;
    let fluid = fluid_by_name("novec-649").unwrap();
    let mut plant = Plant::new(&site, 3).unwrap();
    load(&mut plant, 1.0);
    let amb = weather_at(20.0);
    let design = actions(&plant, 38.0, design_flow_lpm(&site));
    steady(&mut plant, &design, &amb, 4.0, 10.0);
    let im = plant.immersion().unwrap();
    let (t_sat0, die0) = (im.t_sat_c(0).unwrap(), hottest(&plant, 0));
    plant.start_scoring();
    // Starve tank 0's condenser: warmest water the firmware accepts at its lowest flow. Tank 1
    // keeps its design water.
    let (lo, _) = site.halls[0].cdu.flow_setpoint_range_lpm();
    let mut starved = design.clone();
    starved.cdus[0].supply_temp_setpoint_c = Some(44.0);
    starved.cdus[0].flow_setpoint_lpm = Some(lo);
    let mut rose = false;
    let mut steps_at_relief = 0;
    // Until the relief has held the tank for two minutes (at 10 s steps): with 44 °C water at
    // 40 % flow the coil condenses ≈ 20 of 72 kW, so the relief vents ≈ 0.6 kg/s, and a few
    // minutes more would uncover the boards (the next test).
    while steps_at_relief < 12 {
        plant.step(10.0, &amb, &starved);
        let im = plant.immersion().unwrap();
        let (p, ts) = (im.gauge_kpa(0).unwrap(), im.t_sat_c(0).unwrap());
        // Saturation temperature and pressure move together (Clausius–Clapeyron).
        let p_abs = P_ATM_PA + p * 1000.0;
        assert!((fluid.t_sat_c(p_abs) - ts).abs() < 1e-6);
        rose |= p > 1.0;
        if p >= relief - 1e-9 {
            steps_at_relief += 1;
        }
        assert!(plant.kpis().scored_s < 1800.0, "the relief never opened");
    }
    assert!(rose, "tank pressure did not rise with a starved condenser");
    let im = plant.immersion().unwrap();
    let (t_sat1, die1) = (im.t_sat_c(0).unwrap(), hottest(&plant, 0));
    // The relief holds the tank at its set pressure; T_sat at that pressure; dies moved with T_sat
    // (superheat and package drop unchanged at the same power, within the leakage change).
    assert!(
        (im.gauge_kpa(0).unwrap() - relief).abs() < 0.05,
        "{}",
        im.gauge_kpa(0).unwrap()
    );
    assert!((t_sat1 - fluid.t_sat_c(P_ATM_PA + relief * 1000.0)).abs() < 1e-6);
    assert!(t_sat1 > t_sat0 + 2.0, "{t_sat0} -> {t_sat1}");
    let d_die = (die1 - die0) as f64;
    let d_sat = t_sat1 - t_sat0;
    assert!((d_die - d_sat).abs() < 1.0, "die +{d_die:.2} K vs T_sat +{d_sat:.2} K");
    // Tank 1 is untouched.
    assert!(plant.immersion().unwrap().gauge_kpa(1).unwrap() < 0.5 * relief);
    // Fluid loss: the KPI equals the mass that left the tanks (state path vs flow path), and the
    // relief vented most of it.
    let k = plant.kpis();
    let charge = site.halls[0].immersion.as_ref().unwrap().fluid_mass_kg;
    let im = plant.immersion().unwrap();
    let gone: f64 = (0..2).map(|c| charge - im.fluid_kg(c).unwrap()).sum();
    assert!(k.fluid_vented_kg > 10.0, "{k:?}");
    assert!(k.fluid_loss_kg >= k.fluid_vented_kg);
    assert!((k.tank_pressure_max_gauge_kpa - relief).abs() < 0.05);
    // `gone` also holds the warm-up's seal losses (grams).
    assert!(
        gone >= k.fluid_loss_kg && gone - k.fluid_loss_kg < 0.1,
        "{gone} vs {}",
        k.fluid_loss_kg
    );
    // Vapour carried the heat the condenser could not take: the ledger still closes, the tank
    // term included (vented heat from the pool state, condensed heat from the coil).
    assert!(k.energy_balance_error_pct < 0.01, "{}", k.energy_balance_error_pct);
    assert!(k.ledger_tank_residual_kwh.abs() < 1e-4 * k.ledger_heat_in_kwh, "{k:?}");
}

/// The energy ledger of a two-phase site: boards' heat into the pools, heat condensed on the coils
/// (each coil's ε-NTU), vented and seal-loss vapour and the pools' stored heat are terms of their
/// own; with load changes, a daily weather swing and a pump trip on a skid the ledger closes to
/// round-off, and with 10 % of the condensed heat lost on the way into a skid it fails (the CDU
/// residual shows it) while the tank term still closes.
#[test]
fn two_phase_ledger_closes_through_independent_paths_and_fails_when_condensed_heat_is_dropped() {
    let site = two_phase_site(2);
    let run_with = |e: InjectedError| {
        let mut plant = Plant::new(&site, 5).unwrap();
        plant.inject_error(e);
        load(&mut plant, 0.9);
        let a = actions(&plant, 38.0, design_flow_lpm(&site));
        let amb_at = |t: f64| weather_at(22.0 + 10.0 * (2.0 * std::f64::consts::PI * t / 86_400.0).sin());
        steady(&mut plant, &a, &amb_at(0.0), 2.0, 60.0);
        plant.start_scoring();
        for i in 0..1440 {
            // Load steps every 3 hours: the pools and loops store and give back heat.
            if i % 180 == 0 {
                plant.set_slot_util(1, if (i / 180) % 2 == 0 { 0.4 } else { 1.0 });
            }
            let amb = amb_at(plant.time_s());
            plant.step(60.0, &amb, &a);
        }
        plant.kpis()
    };
    let ok = run_with(InjectedError::None);
    assert!(ok.energy_balance_error_pct <= 0.001, "{}", ok.energy_balance_error_pct);
    assert!(ok.ledger_heat_in_kwh > 0.0 && ok.ledger_heat_out_kwh > 0.0);
    assert!(
        ok.ledger_tank_residual_kwh.abs() <= 1e-5 * ok.ledger_heat_in_kwh,
        "{ok:?}"
    );
    assert!(ok.fluid_loss_kg > 0.0);
    // The IT meter agrees with the rack path (GPU power telemetry at 0.01 W): 100 W dies that
    // share one pool run in lockstep, and whole-watt telemetry would round them all one way.
    assert!(ok.it_meter_error_pct <= 0.01, "{}", ok.it_meter_error_pct);
    let k = run_with(InjectedError::DropCondenserHeat);
    assert!(k.energy_balance_error_pct > 1.0, "{}", k.energy_balance_error_pct);
    assert!(k.ledger_cdu_residual_kwh > 0.0, "{k:?}");
    assert!(k.ledger_tank_residual_kwh.abs() <= 1e-5 * k.ledger_heat_in_kwh, "{k:?}");
}

#[test]
fn uncovered_boards_dry_out_and_their_dies_run_away_into_slowdown_and_shutdown() {
    let site = two_phase_site(2);
    let mut plant = Plant::new(&site, 5).unwrap();
    load(&mut plant, 1.0);
    let amb = weather_at(20.0);
    let a = actions(&plant, 38.0, design_flow_lpm(&site));
    steady(&mut plant, &a, &amb, 2.0, 10.0);
    plant.start_scoring();
    let slowdown = site.gpu.slowdown_c as f32;
    assert!(hottest(&plant, 0) < slowdown - 10.0);
    // A leak drains tank 0 below the charge that covers the boards.
    let im = site.halls[0].immersion.as_ref().unwrap();
    let drain = im.fluid_mass_kg - im.min_fluid_mass_kg + 1.0;
    plant.immersion_mut().unwrap().drain_kg(0, drain);
    plant.step(1.0, &amb, &a);
    plant.step(1.0, &amb, &a);
    let n = plant.topology().racks[0].gpus.len() as u32;
    assert_eq!(plant.immersion().unwrap().dried_out(0), Some(n));
    assert_eq!(plant.immersion().unwrap().dried_out(1), Some(0));
    for _ in 0..30 {
        plant.step(2.0, &amb, &a);
    }
    // Film boiling: a 100 W die over 9 cm² at 250 W/(m²·K) heads for hundreds of kelvin:
    // every die of tank 0 crossed slowdown into shutdown (within a step), tank 1 did not notice.
    let k = plant.kpis();
    assert!(k.gpu_temp_max_c >= site.gpu.shutdown_c, "{}", k.gpu_temp_max_c);
    assert!(k.gpu_shutdowns >= u64::from(n), "{}", k.gpu_shutdowns);
    assert!(hottest(&plant, 1) < slowdown - 10.0);
}

#[test]
fn critical_heat_flux_dries_a_surface_out_and_only_the_minimum_heat_flux_rewets_it() {
    let site = two_phase_site(1);
    let topo = Topology::new(&site);
    let mut im = Immersion::new(&site, &topo, 1).expect("an immersion site");
    let spec = site.halls[0].immersion.as_ref().unwrap();
    let fluid = fluid_by_name(&spec.fluid).unwrap();
    let area_m2 = spec.boiling_area_cm2 * 1e-4;
    let p_chf = (spec.chf_enhancement * fluid.chf_zuber_w_m2(P_ATM_PA) * area_m2) as f32;
    let p_min = (spec.chf_enhancement * fluid.q_min_zuber_w_m2(P_ATM_PA) * area_m2) as f32;
    let gpus = topo.racks[0].gpus.clone();
    let n = gpus.len();
    let mut power = vec![100.0f32; n];
    im.prepare_rack(0, gpus.clone(), &power).unwrap();
    assert_eq!(im.dried_out(0), Some(0));
    let r_wet = im.r_eff()[gpus.start];
    // Three dies above the critical heat flux dry out; their resistance jumps to film boiling.
    for p in &mut power[..3] {
        *p = p_chf * 1.05;
    }
    im.prepare_rack(0, gpus.clone(), &power).unwrap();
    assert_eq!(im.dried_out(0), Some(3));
    let r_dry = im.r_eff()[gpus.start];
    let r_film = 1.0 / (spec.film_boiling_w_per_m2_k * area_m2);
    assert!(
        ((r_dry - r_wet) as f64 - r_film).abs() < 1e-3 * r_film,
        "{r_wet} {r_dry}"
    );
    // Back at 100 W (below CHF, above q_min) they stay dry: boiling hysteresis.
    for p in &mut power[..3] {
        *p = 100.0;
    }
    im.prepare_rack(0, gpus.clone(), &power).unwrap();
    assert_eq!(im.dried_out(0), Some(3));
    // Only below the minimum heat flux (a shut-down die) do they rewet.
    for p in &mut power[..3] {
        *p = 0.5 * p_min;
    }
    im.prepare_rack(0, gpus.clone(), &power).unwrap();
    assert_eq!(im.dried_out(0), Some(0));
    // Not a tank: no hook.
    assert!(im.prepare_rack(99, gpus, &power).is_none());
    // A site whose surfaces would boil above CHF at TDP is refused, naming the field.
    let t =
        builtin_site_toml("supernode-2pic")
            .unwrap()
            .replacen("boiling_area_cm2 = 9.0", "boiling_area_cm2 = 3.0", 1);
    let e = Site::from_toml_str("x.toml", &t).unwrap_err().to_string();
    assert!(
        e.contains("immersion.boiling_area_cm2") && e.contains("critical heat flux"),
        "{e}"
    );
}

#[test]
fn two_phase_plant_is_deterministic() {
    let site = two_phase_site(2);
    let run = || {
        let mut plant = Plant::new(&site, 11).unwrap();
        load(&mut plant, 0.8);
        plant.start_scoring();
        let a = actions(&plant, 40.0, design_flow_lpm(&site) * 0.8);
        steady(&mut plant, &a, &weather_at(30.0), 1.0, 30.0);
        (
            plant.kpis(),
            plant.true_gpu_temps_c().to_vec(),
            plant.measurements().clone(),
        )
    };
    let (a, b) = (run(), run());
    assert_eq!(a.0, b.0);
    assert_eq!(a.1, b.1);
    assert_eq!(a.2, b.2);
    assert!(a.2.cdus[0].tank.is_some());
}

#[test]
fn tank_site_errors_name_the_field() {
    let base = builtin_site_toml("supernode-2pic").unwrap();
    for (from, to, field) in [
        ("fluid = \"novec-649\"", "fluid = \"water\"", "immersion.fluid"),
        (
            "relief_gauge_kpa = 10.0",
            "relief_gauge_kpa = 30.0",
            "immersion.relief_gauge_kpa",
        ),
        (
            "fluid_mass_kg = 1100.0",
            "fluid_mass_kg = nan",
            "immersion.fluid_mass_kg",
        ),
        (
            "count = 16\nracks_per_cdu = 1\ncapacity_kw = 90.0",
            "count = 8\nracks_per_cdu = 2\ncapacity_kw = 190.0",
            "cdu.racks_per_cdu",
        ),
        ("heat_to_liquid = 1.0", "heat_to_liquid = 0.9", "rack.heat_to_liquid"),
        (
            "condenser_ua_kw_per_k = 18.0",
            "condenser_ua_kw_per_k = -1.0",
            "immersion.condenser_ua_kw_per_k",
        ),
    ] {
        assert_eq!(base.matches(from).count(), 1, "{from}");
        let e = Site::from_toml_str("x.toml", &base.replacen(from, to, 1))
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{from} -> {e}");
    }
}
