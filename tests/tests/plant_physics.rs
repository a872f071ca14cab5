//! scratch exploration (to be replaced)
#![allow(missing_docs)]
use coolplane_core::signals::{Actions, CduCommand, FacilityCommand};
use coolplane_core::site::{builtin_site, builtin_site_toml, Site};
use coolplane_core::weather::{self, WeatherSample};
use coolplane_sim_plant::faults::{FaultKind, ScheduledFault};
use coolplane_sim_plant::Plant;

const P_ATM: f64 = 101_325.0;
fn w_rh(db: f64, rh: f64) -> WeatherSample {
    let dew = weather::dew_point_from_rh_c(db, rh);
    WeatherSample {
        dry_bulb_c: db,
        wet_bulb_c: weather::wet_bulb_c(db, dew, P_ATM),
        dew_point_c: dew,
        rh_pct: rh,
        pressure_pa: P_ATM,
    }
}
fn rep(t: &str, a: &str, b: &str) -> String {
    assert_eq!(t.matches(a).count(), 1, "{a}");
    t.replacen(a, b, 1)
}
fn small(cdus: u32, racks: u32) -> Site {
    let r = racks as f64 / 12.0;
    let s = (cdus * racks) as f64 / 144.0;
    let mut t = builtin_site_toml("hall-10k").unwrap().to_string();
    t = rep(
        &t,
        "count = 12\nracks_per_cdu = 12",
        &format!("count = {cdus}\nracks_per_cdu = {racks}"),
    );
    t = rep(
        &t,
        "design_load_kw = 1440.0",
        &format!("design_load_kw = {:?}", 1440.0 * r),
    );
    t = rep(&t, "capacity_kw = 1800.0", &format!("capacity_kw = {:?}", 1800.0 * r));
    t = rep(
        &t,
        "pump_design_power_kw = 7.5",
        &format!("pump_design_power_kw = {:?}", 7.5 * r),
    );
    t = rep(&t, "loop_volume_m3 = 0.6", &format!("loop_volume_m3 = {:?}", 0.6 * r));
    t = rep(
        &t,
        "pump_design_power_kw = 60.0",
        &format!("pump_design_power_kw = {:?}", 60.0 * s),
    );
    t = rep(&t, "loop_volume_m3 = 60.0", &format!("loop_volume_m3 = {:?}", 60.0 * s));
    t = rep(
        &t,
        "design_capacity_kw = 19000.0",
        &format!("design_capacity_kw = {:?}", 19000.0 * s),
    );
    t = rep(&t, "fan_power_kw = 300.0", &format!("fan_power_kw = {:?}", 300.0 * s));
    t = rep(&t, "capacity_kw = 4000.0", &format!("capacity_kw = {:?}", 4000.0 * s));
    Site::from_toml_str("small", &t).unwrap()
}
fn hb(p: &Plant) -> Actions {
    Actions {
        cdus: vec![
            CduCommand {
                heartbeat: true,
                ..Default::default()
            };
            p.topology().cdus.len()
        ],
        facilities: vec![
            FacilityCommand {
                heartbeat: true,
                ..Default::default()
            };
            p.topology().halls.len()
        ],
        ..Default::default()
    }
}
fn load(p: &mut Plant, u: f32) {
    p.ensure_slots(2);
    for g in 0..p.topology().gpu_count {
        p.assign_gpu(g as u32, 1)
    }
    p.set_slot_util(1, u);
}

#[test]
fn explore_pump() {
    let site = small(1, 4);
    let mut p = Plant::new(&site, 1).unwrap();
    load(&mut p, 1.0);
    let a = hb(&p);
    let amb = w_rh(20.0, 50.0);
    for _ in 0..60 {
        p.step(60.0, &amb, &a);
    }
    let t0 = p.time_s();
    p.schedule_fault(ScheduledFault {
        start_s: t0 + 10.0,
        end_s: None,
        fault: FaultKind::PumpTrip { cdu: 0 },
    });
    let f0 = p.true_cdu_flow_kg_s(0);
    for _ in 0..60 {
        p.step(1.0, &amb, &a);
        let m = p.measurements();
        eprintln!(
            "t {} f {:.4} alarms {:#x} speed {} pump {:.0}",
            p.time_s() - t0,
            p.true_cdu_flow_kg_s(0) / f0,
            m.cdus[0].alarms,
            m.cdus[0].pump_speed_pct.value,
            p.power().cdu_pumps_w
        );
    }
}

#[test]
fn explore_weather() {
    let mut site = small(1, 12);
    if let Some(dc) = site.halls[0].facility.dry_coolers.as_mut() {
        dc.adiabatic = None;
    }
    for db in [5.0, 10.0, 15.0, 20.0, 25.0, 28.0, 30.0, 32.0, 35.0] {
        let mut p = Plant::new(&site, 3).unwrap();
        load(&mut p, 0.7);
        let a = hb(&p);
        let amb = w_rh(db, 40.0);
        for _ in 0..240 {
            p.step(60.0, &amb, &a);
        }
        let mut acc = [0.0; 6];
        let n = 120;
        for _ in 0..n {
            p.step(60.0, &amb, &a);
            let pw = p.power();
            acc[0] += pw.cooling_w();
            acc[1] += pw.rejection_fans_w;
            acc[2] += pw.facility_pumps_w;
            acc[3] += pw.chiller_w;
            acc[4] += pw.cdu_pumps_w;
            acc[5] += pw.air_handler_fans_w;
        }
        eprintln!(
            "db {db} cool {:.1} fans {:.1} fpump {:.1} ch {:.1} cdu {:.1} ahu {:.1} tfac {:.2} chiller {} it {:.0}",
            acc[0] / n as f64,
            acc[1] / n as f64,
            acc[2] / n as f64,
            acc[3] / n as f64,
            acc[4] / n as f64,
            acc[5] / n as f64,
            p.true_facility_supply_c(0),
            p.chiller_on(0),
            p.power().it_w
        );
    }
}

#[test]
fn explore_hall() {
    let site = builtin_site("hall-10k").unwrap();
    let mut p = Plant::new(&site, 3).unwrap();
    load(&mut p, 0.5);
    let a = hb(&p);
    let amb = w_rh(10.0, 50.0);
    let st = std::time::Instant::now();
    for i in 0..180 {
        p.step(60.0, &amb, &a);
        if i % 20 == 0 {
            eprintln!(
                "cold t {} tfac {:.2} ch {} ad {} fan {}",
                p.time_s(),
                p.true_facility_supply_c(0),
                p.chiller_on(0),
                p.adiabatic_on(0),
                p.measurements().facilities[0].fan_speed_pct.value
            );
        }
    }
    eprintln!("180 steps {:?}", st.elapsed());
    let mut p = Plant::new(&site, 3).unwrap();
    load(&mut p, 1.0);
    let mut a = hb(&p);
    a.facilities[0].supply_temp_setpoint_c = Some(25.0);
    let wb = 30.0;
    let db = 42.0;
    let w = weather::humidity_ratio_from_wet_bulb(db, wb, P_ATM);
    let dew = weather::dew_point_from_vapour_pressure_c(weather::vapour_pressure_from_humidity_ratio_pa(w, P_ATM));
    let amb = WeatherSample {
        dry_bulb_c: db,
        wet_bulb_c: wb,
        dew_point_c: dew,
        rh_pct: weather::relative_humidity_pct(db, dew),
        pressure_pa: P_ATM,
    };
    eprintln!("{amb:?} wb back {}", weather::wet_bulb_c(db, dew, P_ATM));
    for _ in 0..120 {
        p.step(60.0, &amb, &a);
        eprintln!(
            "hot t {} tfac {:.2} ch {} ad {} fan {} chw {:.0} cdu0 {:.2} thot {:.1}",
            p.time_s(),
            p.true_facility_supply_c(0),
            p.chiller_on(0),
            p.adiabatic_on(0),
            p.measurements().facilities[0].fan_speed_pct.value,
            p.power().chiller_w,
            p.true_cdu_supply_c(0),
            p.true_gpu_temps_c().iter().fold(0f32, |a, &b| a.max(b))
        );
    }
}
